// Render math spans with KaTeX (throwOnError, strict): reads a JSON list of
// {"tex": "...", "display": bool} on stdin, writes a JSON list of error messages (null = rendered).
"use strict";
const katex = require("katex");
let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const spans = JSON.parse(input);
  const errors = spans.map((span) => {
    try {
      katex.renderToString(span.tex, {
        displayMode: span.display,
        throwOnError: true,
        strict: "error",
      });
      return null;
    } catch (err) {
      return String(err.message || err);
    }
  });
  process.stdout.write(JSON.stringify(errors));
});
