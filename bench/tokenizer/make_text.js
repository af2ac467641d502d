// Writes the benchmark text: every golden line's text, joined by newlines, repeated to >= MB.
// Usage: node make_text.js GOLDEN_JSONL OUT_FILE MEGABYTES
'use strict';
const fs = require('fs');
const [goldenPath, outPath, megabytesArg] = process.argv.slice(2);
const target = parseFloat(megabytesArg || '8') * 1e6;
const texts = fs.readFileSync(goldenPath, 'utf8').split('\n').filter((l) => l.length > 0)
    .map((l) => JSON.parse(l).text);
const block = texts.join('\n') + '\n';
const blockBytes = Buffer.byteLength(block, 'utf8');
fs.writeFileSync(outPath, block.repeat(Math.max(1, Math.ceil(target / blockBytes))));
