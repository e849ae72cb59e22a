// Conversations kept in this browser (localStorage 'kvad_conversations'), so a reload, a closed
// tab or a restarted server loses nothing. The stored shape (tests write it to set up a page):
//   {current: ID, list: [{id, title, system, updated, messages: [MESSAGE...]}]}
//   MESSAGE: {role: 'user' | 'assistant', content: TEXT, meta?: {...}}
//   meta of an answer: {stats: TEXT, finish: 'stop' | 'length' | 'stopped', context_full: N,
//                       usage: {prompt_tokens, completion_tokens}, error: TEXT}
'use strict';

const conversations = {
  key: 'kvad_conversations',
  state: {current: null, list: []},

  load() {
    const s = recall(this.key);
    if (s && Array.isArray(s.list)) this.state = {current: s.current, list: s.list.filter(c => c && Array.isArray(c.messages))};
    if (!this.current()) this.create();
  },
  save() {
    try {
      localStorage.setItem(this.key, JSON.stringify(this.state));
    } catch (e) {
      toast('This browser would not keep the conversation (storage full?): delete old conversations.', true);
    }
  },
  current() { return this.state.list.find(c => c.id === this.state.current) || null; },
  create() {
    const c = {id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: '', system: '', updated: Date.now(), messages: []};
    this.state.list.unshift(c);
    this.state.current = c.id;
    this.save();
    return c;
  },
  select(id) {
    if (this.state.list.some(c => c.id === id)) this.state.current = id;
    this.save();
  },
  remove(id) {
    this.state.list = this.state.list.filter(c => c.id !== id);
    if (this.state.current === id) this.state.current = this.state.list.length ? this.state.list[0].id : null;
    if (!this.current()) this.create();
    this.save();
  },
  // After a change to conversation c: its title (the first question) and its place on top.
  touch(c) {
    if (!this.state.list.some(x => x.id === c.id)) return;  // deleted meanwhile: stays deleted
    const first = c.messages.find(m => m.role === 'user');
    c.title = first ? first.content.replace(/\s+/g, ' ').trim().slice(0, 60) : '';
    c.updated = Date.now();
    this.state.list = [c, ...this.state.list.filter(x => x.id !== c.id)];
    this.save();
  },
};

// The tokens the conversation holds, from the last answer's usage (prompt + completion).
function conversationTokens(c) {
  for (let i = c.messages.length - 1; i >= 0; i--) {
    const u = c.messages[i].meta && c.messages[i].meta.usage;
    if (u) return u.prompt_tokens + u.completion_tokens;
  }
  return null;
}

function renderConversationList() {
  const ul = $('#conv-list');
  ul.innerHTML = '';
  for (const c of conversations.state.list) {
    const li = el('li', {class: c.id === conversations.state.current ? 'current' : ''},
      el('button', {class: 'conv-open', title: c.title || 'New conversation', onclick: () => switchConversation(c.id)},
        c.title || 'New conversation', el('span', {class: 'muted small'}, ` · ${c.messages.length} messages`)),
      el('button', {class: 'conv-delete', title: 'Delete this conversation', 'aria-label': 'Delete conversation', onclick: () => deleteConversation(c.id)}, '×'));
    ul.append(li);
  }
}
