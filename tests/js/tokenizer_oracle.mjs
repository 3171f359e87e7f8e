// Tokenizer oracle: encodes the test corpus with Hugging Face's own
// JavaScript tokenizers (@huggingface/tokenizers, independent of Pagoda) and
// writes the expected ids, which tests/tokenizer/test_oracle.cpp compares
// against. Usage: node tokenizer_oracle.mjs OUT_DIR
import { readFileSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const outDir = process.argv[2];
if (!outDir) {
  console.error("usage: node tokenizer_oracle.mjs OUT_DIR");
  process.exit(2);
}
mkdirSync(outDir, { recursive: true });

const corpus = readFileSync(join(root, "tests/data/tokenizer_corpus.jsonl"), "utf8")
  .split("\n")
  .filter((l) => l.length > 0)
  .map((l) => JSON.parse(l));

for (const name of ["qwen3", "llama3"]) {
  const dir = join(root, "tests/data/tokenizers", name);
  const json = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
  const tok = new Tokenizer(json, config);
  const lines = corpus.map((text) => {
    const ids = tok.encode(text, { add_special_tokens: false }).ids;
    return JSON.stringify({
      text,
      ids,
      ids_with_special: tok.encode(text).ids,
      decoded: tok.decode(ids, { skip_special_tokens: false }),
    });
  });
  writeFileSync(join(outDir, `${name}.jsonl`), lines.join("\n") + "\n");
  console.log(`${name}: ${lines.length} cases`);
}
