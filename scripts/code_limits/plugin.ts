/**
 * The size limits of issue 29 as a `deno lint` plugin, run by
 * `deno task limits` (never by the project's own `deno lint`): a source
 * file over {@link FILE_LINES} lines (the files that hold one thing each
 * are exempt), a function over {@link FUNCTION_LINES} lines, or over
 * {@link CALL_PATH_FUNCTION_LINES} on the call path, and `mod.ts`
 * exporting more than {@link MOD_SYMBOLS} names.
 *
 * @module
 */

const FILE_LINES = 650;
const FUNCTION_LINES = 120;
const CALL_PATH_FUNCTION_LINES = 80;
const MOD_SYMBOLS = 40;

/** Files that hold one thing each, however long: the codec halves, errors, options. */
const FILE_EXEMPT = [
  "src/protocol/encode_value.ts",
  "src/protocol/decode_value.ts",
  "src/errors.ts",
  "src/parent/options.ts",
];

/** The files every call runs through: serve, connection, pool dispatch, the codec and frames. */
const CALL_PATH = [
  /\/src\/worker\/(serve|_outbox|_progress|_stream_pump)\.ts$/,
  /\/src\/parent\/(connection|pool|_call|_mode)\.ts$/,
  /\/src\/protocol\/[a-z_]+\.ts$/,
];

const lineCount = (text: string, range: Deno.lint.Range): number => {
  let n = 1;
  for (let i = range[0]; i < range[1]; i++) if (text.charCodeAt(i) === 10) n++;
  return n;
};

type Fn =
  | Deno.lint.FunctionDeclaration
  | Deno.lint.FunctionExpression
  | Deno.lint.ArrowFunctionExpression;

const fnName = (node: Fn): string => {
  if (node.type === "FunctionDeclaration" && node.id) return node.id.name;
  const parent = node.parent;
  if (parent?.type === "MethodDefinition" || parent?.type === "Property") {
    const key = parent.key;
    if (key.type === "Identifier") return key.name;
    if (key.type === "PrivateIdentifier") return "#" + key.name;
  }
  if (
    parent?.type === "VariableDeclarator" && parent.id.type === "Identifier"
  ) {
    return parent.id.name;
  }
  return "(anonymous)";
};

const plugin: Deno.lint.Plugin = {
  name: "limits",
  rules: {
    "function-lines": {
      create(context) {
        const file = context.filename;
        const callPath = CALL_PATH.some((re) => re.test(file));
        const max = callPath ? CALL_PATH_FUNCTION_LINES : FUNCTION_LINES;
        const check = (node: Fn) => {
          if (!node.body) return;
          const lines = lineCount(context.sourceCode.text, node.range);
          if (lines <= max) return;
          context.report({
            node,
            message: `${fnName(node)} is ${lines} lines (at most ${max}${
              callPath ? " on the call path" : ""
            })`,
          });
        };
        return {
          FunctionDeclaration: check,
          FunctionExpression: check,
          ArrowFunctionExpression: check,
        };
      },
    },
    "file-lines": {
      create(context) {
        return {
          Program(node) {
            const file = context.filename;
            if (FILE_EXEMPT.some((f) => file.endsWith("/" + f))) return;
            const lines = context.sourceCode.text.split("\n").length - 1;
            if (lines <= FILE_LINES) return;
            context.report({
              range: [0, 0],
              message: `${lines} lines (at most ${FILE_LINES})`,
            });
            void node;
          },
        };
      },
    },
    "mod-symbols": {
      create(context) {
        if (!/\/mod\.ts$/.test(context.filename)) return {};
        let count = 0;
        return {
          ExportNamedDeclaration(node) {
            count += node.specifiers.length;
            if (node.declaration) count++;
          },
          "Program:exit"() {
            if (count <= MOD_SYMBOLS) return;
            context.report({
              range: [0, 0],
              message: `mod.ts exports ${count} names (at most ${MOD_SYMBOLS})`,
            });
          },
        };
      },
    },
  },
};

export default plugin;
