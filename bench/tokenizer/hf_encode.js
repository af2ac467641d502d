// Times Hugging Face tokenizers (Node binding) encoding a file in-process, like
// `dsv41 bench-tokenize`. Prints one JSON line: bytes, chunks, tokens, seconds per timed run,
// median MB/s. With CHUNK_BYTES > 0 the file is cut after the first newline past every CHUNK_BYTES
// bytes (the rule of `dsv41 bench-tokenize --chunk-bytes`) and encoded with one encodeBatch call;
// run with TOKENIZERS_PARALLELISM=false to keep HF on one thread, as dsv41 is.
// Usage: node hf_encode.js TOKENIZER_JSON TEXT_FILE RUNS WARMUP [CHUNK_BYTES]
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

function chunksOf(buffer, chunkBytes) {
  if (chunkBytes === 0) return [buffer.toString('utf8')];
  const chunks = [];
  let start = 0;
  while (start < buffer.length) {
    let end = buffer.indexOf(0x0a, Math.min(buffer.length, start + chunkBytes) - 1);
    end = end < 0 ? buffer.length : end + 1;
    chunks.push(buffer.subarray(start, end).toString('utf8'));
    start = end;
  }
  return chunks;
}

async function main() {
  const [tokenizerPath, textPath, runsArg, warmupArg, chunkArg] = process.argv.slice(2);
  const runs = parseInt(runsArg || '5', 10);
  const warmup = parseInt(warmupArg || '1', 10);
  const chunkBytes = parseInt(chunkArg || '0', 10);
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const buffer = fs.readFileSync(textPath);
  const chunks = chunksOf(buffer, chunkBytes);
  const seconds = [];
  let tokens = 0;
  for (let run = 0; run < warmup + runs; ++run) {
    const start = process.hrtime.bigint();
    if (chunkBytes === 0) {
      const encoding = await tokenizer.encode(chunks[0], null, { addSpecialTokens: false });
      tokens = encoding.getIds().length;
    } else {
      const encodings = await tokenizer.encodeBatch(chunks, { addSpecialTokens: false });
      tokens = encodings.reduce((n, e) => n + e.getIds().length, 0);
    }
    const stop = process.hrtime.bigint();
    if (run >= warmup) seconds.push(Number(stop - start) / 1e9);
  }
  const sorted = [...seconds].sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)];
  console.log(JSON.stringify({ bytes: buffer.length, chunks: chunks.length, tokens, seconds,
                               median_seconds: median, median_mb_per_s: buffer.length / 1e6 / median }));
}

main().catch((e) => { console.error(e); process.exit(1); });
