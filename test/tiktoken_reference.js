// tiktoken_reference.js — the reference for the rank-file (Llama 3) kind of llmc/tokenizer.h:
// tiktoken itself (the npm package tiktoken, the Rust library compiled to WebAssembly).
//   node test/tiktoken_reference.js ranks OUT     writes cl100k_base's ranks (shipped in the package)
//                                                 as a rank file, "base64 rank" a line (the format of
//                                                 Llama 3's original/tokenizer.model)
//   node test/tiktoken_reference.js encode RANKS FILE
//                                                 prints FILE's tokens as JSON, under those ranks and
//                                                 Llama 3's pre-tokenizer regex (Meta's tokenizer.py)
// (with NODE_PATH pointing at its node_modules)
const fs = require('fs');
const LLAMA3_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const [mode, a, b] = process.argv.slice(2);
if (mode === 'ranks') {
    // the package's compact form: "! FIRST_RANK" then tokens of consecutive ranks, space-separated
    const parts = require('tiktoken/encoders/cl100k_base.json').bpe_ranks.split(' ');
    const lines = [];
    for (let i = 0, rank = 0; i < parts.length; i++) {
        if (parts[i] === '!') { rank = Number(parts[++i]); continue; }
        lines.push(parts[i] + ' ' + rank++);
    }
    fs.writeFileSync(a, lines.join('\n') + '\n');
} else if (mode === 'encode') {
    const { Tiktoken } = require('tiktoken/lite');
    const enc = new Tiktoken(fs.readFileSync(a, 'utf8'), {}, LLAMA3_PATTERN);
    process.stdout.write(JSON.stringify(Array.from(enc.encode_ordinary(fs.readFileSync(b, 'utf8')))));
    enc.free();
} else {
    console.error('usage: node test/tiktoken_reference.js ranks OUT | encode RANKS FILE');
    process.exit(2);
}
