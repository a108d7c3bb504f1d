#!/usr/bin/env node
// tools/reference/make_tokenizer_fixtures.js [DATA_DIR]: run the reference GPT-2 encoder (npm
// gpt-3-encoder 1.1.4, Encoder.js, fetched by tools/fetch_assets.sh into DATA_DIR/gpt2; DATA_DIR
// defaults to $SHARDLM_DATA or <repo>/data) on a fixed list of cases and write
//   tests/fixtures/tokenizer/cases.json         [{"text", "ids"[, "decoded"]}]  encode cases; "decoded"
//                                               only where the reference decode(ids) differs from text
//   tests/fixtures/tokenizer/decode_cases.json  [{"ids", "text"}]  decode cases, mostly invalid UTF-8
//   tests/fixtures/tokenizer/meta.json          versions the fixtures were made with
// The reference decode is TextDecoder("utf-8").decode(bytes): invalid UTF-8 becomes U+FFFD (one per
// maximal invalid subsequence, WHATWG) and a leading byte order mark is dropped.
// Deterministic: same Node.js (same Unicode tables) -> same files. Usage: node make_tokenizer_fixtures.js
'use strict';
const fs = require('fs');
const path = require('path');

const repo = path.resolve(__dirname, '..', '..');
const dataDir = process.argv[2] || process.env.SHARDLM_DATA || path.join(repo, 'data');
const encoderJs = path.join(dataDir, 'gpt2', 'Encoder.js');
if (!fs.existsSync(encoderJs)) {
  console.error(`make_tokenizer_fixtures: ${encoderJs} not found\n---> HINT: run tools/fetch_assets.sh`);
  process.exit(1);
}
const { encode, decode } = require(encoderJs);
const outDir = path.join(repo, 'tests', 'fixtures', 'tokenizer');

// Deterministic PRNG (mulberry32).
function rng(seed) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// ---- encode cases -------------------------------------------------------------------------------
const texts = [
  // empty, spaces, newlines, tabs
  '', ' ', '  ', '   ', 'a', 'a b', 'a  b', 'a   b', ' a', '  a', 'a ', 'a  ', ' leading', 'trailing ',
  'multiple   spaces   here', '\n', '\n\n', '\n\n\n', ' \n ', ' \n', '\n ', '\t', '\t\t', 'a\tb', '\ta\n',
  'line one\nline two\n', 'para one.\n\npara two.\n\n\n', '\r\n', 'windows\r\nline\r\nendings\r\n',
  'x \n\n y', '  \t \n  ', 'end with spaces   ', 'tab\t\tthen text', '\u000b\u000cvt ff',
  // contractions, both cases
  "I'm", "I'M", "don't", "DON'T", "Don'T", "we'll've", "WE'LL'VE", "they're", "THEY'RE", "you've",
  "he'd", "she's", "it's", "It'S", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "' s", "''s", "'", "''",
  "rock'n'roll", "o'clock", "y'all'd've", "'sup", "'Twas", "can't won't shan't", "CAN'T",
  'I\u2019m curly', // right single quote: not a contraction
  // digits
  '12345678901234567890', '3.14159', '1,000,000', '0', '007', 'v1.2.3', 'abc123def', '123abc', '$1,234.56',
  '1e-10', '-42', '+3', '2024-05-20', '12:30:45', '٣٤٥ arabic-indic digits', '½ ¾ ² ³ Ⅻ ⅻ ①②③',
  // punctuation
  '!!!???...', '--->', '(){}[]', '...', '?!', '!?!?', '<|endoftext|>', 'a<|endoftext|>b',
  'before <|endoftext|> after', '<|endoftext|><|endoftext|>', '<|endoftext', 'endoftext|>',
  '@#$%^&*', '~`|\\', '"quoted"', "'single'", '«guillemets»', '“smart quotes”', '— em dash – en dash',
  '...and then', 'end.', 'a.b.c', 'e.g.', 'i.e.,', '#hashtag', '@mention', '__init__', '->', '=>', '::',
  '/* comment */', '// comment', '<!-- html -->', '<div class="x">hi</div>',
  // comma/quote runs (the reference looks merge ranks up by "first,second")
  '","', '",",",","', '["a","b","c"]', "['a','b']", '{"k":"v","k2":"v2"}', '"],"', '"],["', '),"', '},"',
  "',\"", '.",', '"",""', '],[', "','", "',','", ' ,"', '.,"', ',,,,', ',"', '",', '["",""]',
  '"\\",\\""', "'\",'\"", '"a",', '],[],[', '"],"],"],"', '"),"),"', '".","', '".",".",".",".","',
  // URLs, paths, emails
  'https://example.com/path?query=1&b=two#frag', 'http://localhost:8080/', 'www.example.org',
  'ftp://files.example.net/pub/file.tar.gz', '/usr/local/bin/shardlm', 'C:\\Windows\\System32',
  'user.name+tag@example.co.uk', 'https://github.com/openai/gpt-2/blob/master/src/encoder.py',
  // code
  '#include <vector>\n\nint main(int argc, char** argv) {\n    std::vector<int> v{1, 2, 3};\n' +
      '    for (auto& x : v) x *= 2;\n    return v[0] == 2 ? 0 : 1;\n}\n',
  'def f(x):\n    if x > 0:\n        return x ** 2\n    else:\n        return -x\n\n\nprint(f(3))\n',
  'class Foo:\n\tdef __init__(self):\n\t\tself.bar = {"a": [1, 2], \'b\': None}\n',
  'const x = (a, b) => a + b; // arrow\nlet s = `template ${x}`;\n',
  'SELECT * FROM users WHERE id = 42 AND name LIKE \'%bob%\';',
  '    indented four\n        indented eight\n',
  'if (a && b || !c) { x++; y--; z <<= 2; }',
  // accents, scripts
  'café', 'naïve résumé', 'Ångström', 'straße', 'Ελληνικά γράμματα', 'ΑΒΓ αβγ', 'Привет, мир!',
  'Съешь же ещё этих мягких французских булок', '日本語のテキスト', '中文文本测试', '한국어 텍스트',
  'עברית', 'العربية', 'हिन्दी', 'ไทย', 'Tiếng Việt', 'Ĳsselmeer', 'ǅ ǈ ǋ', 'ﬁ ﬂ', 'Ａｂｃ　全角',
  'mixed English и русский 和中文', 'µ', 'ª º', '¿Qué?', '¡Hola!',
  // emoji
  '😀', '😀😀😀', 'hi 😀', '👍🏽', '👍🏻👍🏿', '👨‍👩‍👧‍👦', '🏳️‍🌈', '❤️', '🇺🇸🇫🇷', 'a😀b', '1️⃣',
  '👩🏽‍💻 codes', '🤖🦾',
  // combining marks
  'e\u0301', 'cafe\u0301', 'e\u0301\u0301', '\u0301', ' \u0301', 'a\u0308o\u0308u\u0308', 'Z\u0351\u0354\u0363',
  'ก\u0e34', 'n\u0303 tilde',
  // unicode spaces (JS \s vs not)
  'a\u00a0b', '\u00a0', '\u00a0\u00a0a', 'a \u00a0b', 'x\u2000y\u2001z\u200a.', '\u2028', 'a\u2028b', '\u2029',
  '\u3000全角スペース', '\u1680ogham', '\u202fnarrow', '\u205fmath', 'zero\u200bwidth', '\u200b',
  '\ufeffBOM at start', 'BOM\ufeffinside', '\ufeff', ' \ufeff', '\u0085NEL', 'a\u0085b', 'mongolian\u180evs',
  'a \u180e b', '  \u00a0 \u3000 x', '\u00a0\n', 'nbsp\u00a0\u00a0\u00a0end', 'a\u00ad soft hyphen',
  // control characters
  '\u0000', 'a\u0000b', '\u0001\u0002\u001f', '\u007f', '\u0080\u009f',
  // characters newer than Unicode 14 (letters and digits in Node's ICU, not in PCRE2 10.42's tables)
  '\u{31350}\u{31351}', ' \u{2EBF0}x', '\u{1E4D0}\u{1E4D1} \u{1E4F0}\u{1E4F1}', '\u{16D40}\u{16D70}',
  '\u{10D4A}\u{10D40}', 'a\u{11380}b', '\u{1CCF0}\u{1CCF9}7', 'x\u{A7CB}y', '\u{13460}',
  // unassigned / private use / specials
  '\ue000', '\u{F0000}', '\ufffd', '\uffff', '\u{10FFFF}', '\u{E0001}',
  // misc
  'The quick brown fox jumps over the lazy dog.', 'THE QUICK BROWN FOX', 'ThE qUiCk', 'Hello, World!',
  'supercalifragilisticexpialidocious', 'antidisestablishmentarianism', 'pneumonoultramicroscopic',
  'Mr. Smith went to Washington, D.C., on Jan. 1st, 1790.', 'A.I. & M.L. (2024)',
];

// Long words: exercise the O(n log n) BPE path for words of more than 64 bytes.
{
  const r = rng(1);
  const letters = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
  let w = '';
  for (let i = 0; i < 3000; i++) w += letters[Math.floor(r() * letters.length)];
  texts.push(w, ' ' + w.slice(0, 200));
  let dna = '';
  for (let i = 0; i < 2000; i++) dna += 'ACGT'[Math.floor(r() * 4)];
  texts.push(dna);
  texts.push('a'.repeat(1000), ' ' + 'z'.repeat(513), 'ab'.repeat(300));
  const punct = '",[]\'{}().:;!?-_/\\';
  let p = '';
  for (let i = 0; i < 1500; i++) p += punct[Math.floor(r() * punct.length)];
  texts.push(p);
  texts.push('",'.repeat(200), '"],'.repeat(100), '",",'.repeat(60), ",'".repeat(100), '.",'.repeat(80));
  texts.push(' '.repeat(100) + 'x', ' '.repeat(1000), '\n'.repeat(300), '1234567890'.repeat(50));
  texts.push('é'.repeat(200), '日本'.repeat(100), '😀'.repeat(50), '\u00a0'.repeat(100) + 'x');
}

// Random strings over an alphabet with every class boundary the pattern cares about.
{
  const r = rng(20240520);
  const alphabet = [
    'a', 'b', 'e', 's', 't', 'd', 'm', 'l', 'r', 'v', 'S', 'T', 'D', 'M', 'L', 'R', 'V', 'x', 'Q',
    '0', '1', '9', "'", "'", '"', ',', '.', '[', ']', '{', '}', '(', ')', '-', '!', '?', '<', '|', '>',
    ' ', ' ', ' ', ' ', '\n', '\t', '\r', '\u00a0', '\u2003', '\u3000', '\ufeff', '\u0085', '\u180e', '\u2028',
    'é', 'ß', 'Ω', 'ж', '日', '한', '٣', '²', '½', '\u0301', '\u200d', '😀', '👍', '🏽', '\u{31350}', '\u{1E4F0}',
    '<|endoftext|>', "'s", "'ll", "'ve", "'re", "'M",
  ];
  for (let n = 0; n < 300; n++) {
    const len = 1 + Math.floor(r() * 40);
    let s = '';
    for (let i = 0; i < len; i++) s += alphabet[Math.floor(r() * alphabet.length)];
    texts.push(s);
  }
}

// A slice of real corpus text.
{
  const sotu = path.join(dataDir, 'sotu', 'raw');
  const names = fs.existsSync(sotu) ? fs.readdirSync(sotu).filter(f => f.endsWith('.txt')).sort() : [];
  if (names.length === 0) {
    console.error(`make_tokenizer_fixtures: no speeches in ${sotu}\n---> HINT: run tools/fetch_assets.sh`);
    process.exit(1);
  }
  const last = fs.readFileSync(path.join(sotu, names[names.length - 1]), 'utf8');
  texts.push(last.slice(0, 4000));
  const first = fs.readFileSync(path.join(sotu, names[0]), 'utf8');
  texts.push(first.slice(0, 2000));
  // A speech with curly quotes and dashes.
  const curly = names.map(f => fs.readFileSync(path.join(sotu, f), 'utf8')).find(t => /[\u2019\u2014]/.test(t));
  if (curly) {
    const i = curly.search(/[\u2019\u2014]/);
    texts.push(curly.slice(Math.max(0, i - 1000), i + 1000));
  }
}

const cases = texts.map(text => {
  const ids = encode(text);
  if (!ids.every(x => Number.isInteger(x))) throw new Error(`reference gave a non-integer id for ${JSON.stringify(text)}`);
  const c = { text, ids };
  const d = decode(ids);
  if (d !== text) c.decoded = d;
  return c;
});

// ---- decode cases -------------------------------------------------------------------------------
const encoder = JSON.parse(fs.readFileSync(path.join(dataDir, 'gpt2', 'encoder.json'), 'utf8'));
function byteToUnicode() {  // GPT-2's bytes_to_unicode
  const bs = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const m = {};
  let n = 0;
  for (let b = 0; b < 256; b++) m[b] = bs.includes(b) ? String.fromCharCode(b) : String.fromCharCode(256 + n++);
  return m;
}
const b2u = byteToUnicode();
const byteId = b => encoder[b2u[b]];
const bytesIds = arr => arr.map(byteId);
const decodeIds = [
  [],
  bytesIds([0x80]),                    // lone continuation byte
  bytesIds([0xbf]),
  bytesIds([0xff]),                    // never valid
  bytesIds([0xfe, 0xff]),
  bytesIds([0xc0, 0xaf]),              // overlong '/'
  bytesIds([0xc1, 0x81]),
  bytesIds([0xe0, 0x80, 0x80]),        // overlong, E0 needs A0..BF next
  bytesIds([0xed, 0xa0, 0x80]),        // UTF-16 surrogate
  bytesIds([0xf4, 0x90, 0x80, 0x80]),  // above U+10FFFF
  bytesIds([0xf5, 0x80]),
  bytesIds([0xf0, 0x9f]),              // first half of an emoji
  bytesIds([0xf0, 0x9f, 0x98]),        // first three quarters
  bytesIds([0x98, 0x80]),              // second half
  bytesIds([0xf0, 0x9f, 0x41]),        // truncated then ASCII
  bytesIds([0xe2, 0x82]),              // truncated euro sign
  bytesIds([0xe2, 0x82, 0xe2, 0x82, 0xac]),
  bytesIds([0xc3]),
  bytesIds([0xc3, 0xc3, 0xa9]),
  [...encode('ok '), ...bytesIds([0xf0, 0x9f]), ...encode(' ok')],
  [...bytesIds([0xef, 0xbb, 0xbf]), ...encode('BOM then text')],  // leading BOM: dropped
  [...bytesIds([0xef, 0xbb, 0xbf, 0xef, 0xbb, 0xbf])],             // only the first is dropped
  [...encode(' '), ...bytesIds([0xef, 0xbb, 0xbf])],              // not leading: kept
  bytesIds([0xef, 0xbb]),              // half a BOM
  [50256],
  [...encode('text'), 50256, ...encode('more')],
  [...encode('<|endoftext|>')],
];
// Emoji token sequences cut in the middle, and reversed.
for (const s of ['😀', '👨‍👩‍👧‍👦', '日本語', 'é', '👍🏽']) {
  const ids = encode(s);
  for (let k = 1; k < ids.length; k++) decodeIds.push(ids.slice(0, k), ids.slice(k));
  decodeIds.push(ids.slice().reverse());
}
// Random ids (often partial UTF-8).
{
  const r = rng(7);
  for (let n = 0; n < 60; n++) {
    const len = 1 + Math.floor(r() * 12);
    const ids = [];
    for (let i = 0; i < len; i++) ids.push(Math.floor(r() * 50257));
    decodeIds.push(ids);
  }
  // Runs of single high bytes.
  for (let n = 0; n < 40; n++) {
    const len = 1 + Math.floor(r() * 6);
    const bytes = [];
    for (let i = 0; i < len; i++) bytes.push(0x80 + Math.floor(r() * 128));
    decodeIds.push(bytesIds(bytes));
  }
}
const decodeCases = decodeIds.map(ids => ({ ids, text: decode(ids) }));

fs.mkdirSync(outDir, { recursive: true });
const write = (name, value) => {
  const body = '[\n' + value.map(v => JSON.stringify(v)).join(',\n') + '\n]\n';
  fs.writeFileSync(path.join(outDir, name), body);
  console.log(`make_tokenizer_fixtures: wrote ${path.join(outDir, name)} (${value.length} cases, ${body.length} bytes)`);
};
write('cases.json', cases);
write('decode_cases.json', decodeCases);
const meta = {
  generator: 'tools/reference/make_tokenizer_fixtures.js',
  reference: 'npm gpt-3-encoder@1.1.4 Encoder.js',
  node: process.version,
  unicode: process.versions.unicode,
  icu: process.versions.icu,
};
fs.writeFileSync(path.join(outDir, 'meta.json'), JSON.stringify(meta, null, 2) + '\n');
