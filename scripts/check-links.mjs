#!/usr/bin/env node
// Checks the documentation's cross-references, without building anything:
//   - every relative link of README.md, CHANGELOG.md, BENCHMARKS.md and docs/*.md
//     ([text](path), [text](path#anchor), [text](#anchor)) names a file or folder
//     that exists, and its #anchor names a heading of that markdown file (GitHub's
//     anchors: lower case, punctuation dropped, spaces as hyphens, -1, -2 … for
//     repeats);
//   - every `test/….ts` path the pages mention exists (a `*` in it must match at
//     least one file), so a renamed test cannot leave a guide pointing at nothing.
// Code blocks are skipped for links and headings, but not for test paths.
//
//   node scripts/check-links.mjs      # also run first by scripts/check-examples.mjs
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, posix, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** The markdown pages checked: the front page, the history, the benchmark report and the guides. */
export function docSources() {
  const top = ["README.md", "CHANGELOG.md", "BENCHMARKS.md"].filter((f) => existsSync(join(root, f)));
  const guides = readdirSync(join(root, "docs")).filter((f) => f.endsWith(".md")).sort().map((f) => `docs/${f}`);
  return [...top, ...guides];
}

/** GitHub's anchor for a heading's text (github-slugger's rule). */
export function slug(heading) {
  return heading
    .trim()
    .toLowerCase()
    .replace(/<[^>]*>/g, "")
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
    .replace(/ /g, "-");
}

/** The lines of a markdown file outside fenced code blocks (others are blanked, so line numbers hold). */
function prose(markdown) {
  let fence;
  return markdown.split("\n").map((line) => {
    const m = /^\s*(```+|~~~+)/.exec(line);
    if (fence === undefined && m) {
      fence = m[1][0];
      return "";
    }
    if (fence !== undefined) {
      if (m && m[1][0] === fence) fence = undefined;
      return "";
    }
    return line;
  });
}

/** Every anchor a markdown file defines: its headings' slugs (repeats numbered) and explicit `<a id|name>` ones. */
export function anchorsOf(markdown) {
  const anchors = new Set();
  const seen = new Map();
  for (const line of prose(markdown)) {
    const h = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (h) {
      // inline code, emphasis and link targets do not reach the anchor: only their text does
      const text = h[1].replace(/\[([^\]]*)\]\([^)]*\)/g, "$1");
      const base = slug(text);
      const n = seen.get(base) ?? 0;
      seen.set(base, n + 1);
      anchors.add(n === 0 ? base : `${base}-${n}`);
    }
    for (const a of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(a[1]);
  }
  return anchors;
}

/** Problems found in one page, as `file:line: message` strings. */
export function checkPage(source) {
  const problems = [];
  const markdown = readFileSync(join(root, source), "utf8");
  const lines = prose(markdown);
  lines.forEach((raw, i) => {
    // links inside inline code are examples, not links
    const line = raw.replace(/`[^`]*`/g, "``");
    for (const m of line.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      const target = m[1];
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto: …
      const [path, anchor] = target.split("#", 2);
      const file = path === "" ? source : posix.normalize(posix.join(posix.dirname(source), decodeURI(path)));
      const where = `${source}:${i + 1}`;
      if (file.startsWith("..")) {
        problems.push(`${where}: ${target} points outside the repository`);
        continue;
      }
      if (!existsSync(join(root, file))) {
        problems.push(`${where}: ${target}: ${file} does not exist`);
        continue;
      }
      if (anchor !== undefined) {
        if (!file.endsWith(".md") || statSync(join(root, file)).isDirectory()) {
          problems.push(`${where}: ${target}: an anchor into ${file}, which is not a markdown page`);
        } else if (!anchorsOf(readFileSync(join(root, file), "utf8")).has(anchor)) {
          problems.push(`${where}: ${target}: ${file} has no heading with the anchor #${anchor}`);
        }
      }
    }
  });
  markdown.split("\n").forEach((line, i) => {
    for (const m of line.matchAll(/(?<![\w/.-])test\/[\w./*-]+\.ts\b/g)) {
      if (!testPathExists(m[0])) problems.push(`${source}:${i + 1}: ${m[0]} does not exist`);
    }
  });
  return problems;
}

/** Whether a `test/…ts` path exists; a `*` in its last part matches any run of characters. */
function testPathExists(path) {
  if (!path.includes("*")) return existsSync(join(root, path));
  const dir = posix.dirname(path);
  if (!existsSync(join(root, dir))) return false;
  const re = new RegExp(`^${posix.basename(path).replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*")}$`);
  return readdirSync(join(root, dir)).some((f) => re.test(f));
}

/** Checks every page; returns the problems (empty when all links, anchors and test paths resolve). */
export function checkLinks() {
  return docSources().flatMap(checkPage);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const problems = checkLinks();
  if (problems.length > 0) {
    console.error(`check-links: ${problems.length} broken reference(s):\n  ${problems.join("\n  ")}`);
    process.exit(1);
  }
  console.log(`check-links: every relative link, anchor and test path resolves (${docSources().map((s) => relative(root, join(root, s))).join(", ")})`);
}
