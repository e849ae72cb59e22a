// Checks generated texts against JSON Schemas the way the runtime's grammar tests do: Python's json
// and jsonschema (tests/support/validate_json_schema.py, Debian's python3-jsonschema, which
// scripts/install-deps.sh installs), never kvad's own grammar code.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const script = fileURLToPath(new URL('../support/validate_json_schema.py', import.meta.url));

// [{schema, text}] -> one verdict each: "ok" or "FAIL: why".
export function validate(cases) {
  const input = cases.map(c => JSON.stringify({ schema: c.schema, text: c.text })).join('\n') + '\n';
  const dir = mkdtempSync(join(tmpdir(), 'kvad-validate-'));
  const file = join(dir, 'cases.jsonl');  // a file: node gives a child's stdin as a socket, which /dev/stdin cannot open
  writeFileSync(file, input);
  const r = spawnSync('/usr/bin/python3', [script, file], { encoding: 'utf8' });
  rmSync(dir, { recursive: true, force: true });
  if (r.status !== 0) throw new Error(`the validator failed (apt-get install python3-jsonschema): ${r.stderr}`);
  const verdicts = r.stdout.trim().split('\n');
  if (verdicts.length !== cases.length) throw new Error(`the validator answered ${verdicts.length} of ${cases.length}`);
  return verdicts;
}

// Fails naming every text that does not validate.
export function assertAllValid(cases) {
  const bad = validate(cases).map((v, i) => [v, cases[i].text]).filter(([v]) => v !== 'ok');
  if (bad.length) throw new Error(bad.map(([v, t]) => `${v}: ${JSON.stringify(t)}`).join('\n'));
}
