/**
 * A hand-written stdin/stdout worker (`hand_cli.ts`): reads "a b" lines,
 * writes their sum, exits at end of input.
 *
 * @module
 */

import process from "node:process";

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk: string) => {
  input += chunk;
  let newline: number;
  while ((newline = input.indexOf("\n")) >= 0) {
    const [a = 0, b = 0] = input.slice(0, newline).split(" ").map(Number);
    input = input.slice(newline + 1);
    process.stdout.write(`${a + b}\n`);
  }
});
