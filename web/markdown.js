// Model answers as Markdown. marked (Debian's libjs-marked) turns the text into HTML; DOMPurify
// (Debian's node-dompurify) then removes whatever could run or act: scripts, event handlers,
// javascript: links, forms, styles. A model's output is untrusted text — it can repeat a prompt
// injected from anywhere — so it reaches the page only through renderMarkdown().
'use strict';

const markdownReady = typeof marked !== 'undefined' && typeof DOMPurify !== 'undefined' && DOMPurify.isSupported;

if (markdownReady) {
  // breaks: a single newline is a line break, as chat models mean it. No header ids: answers
  // would otherwise mint element ids that clash with the page's own.
  marked.setOptions({gfm: true, breaks: true, headerIds: false, mangle: false});
  // Links open in a new tab, without handing the page to the target.
  DOMPurify.addHook('afterSanitizeAttributes', node => {
    if (node.tagName === 'A' && node.hasAttribute('href')) {
      node.setAttribute('target', '_blank');
      node.setAttribute('rel', 'noopener noreferrer');
    }
  });
}

// Beyond DOMPurify's defaults: no images (they would fetch from this server with the answer's
// chosen path), no forms or inputs (an answer must not ask for anything), no inline styles.
const purifyOptions = {
  FORBID_TAGS: ['img', 'style', 'form', 'input', 'button', 'textarea', 'select', 'option', 'iframe', 'video', 'audio'],
  FORBID_ATTR: ['style'],
  ALLOW_DATA_ATTR: false,
};

// Renders text as sanitised Markdown into target; plain text when the libraries did not load.
function renderMarkdown(target, text) {
  if (!markdownReady) { target.textContent = text; return; }
  target.innerHTML = DOMPurify.sanitize(marked.parse(text), purifyOptions);
}
