// deno-lint-ignore-file no-console
// An echo server for the bench's network row, in a process of its own (not
// the parent's event loop, which runs the broker): listens on 127.0.0.1 on
// a free port, prints the port, echoes every byte until stdin closes.
import { createServer } from "node:net";
import process from "node:process";

const server = createServer((socket) => {
  socket.setNoDelay(true);
  socket.pipe(socket);
  socket.on("error", () => socket.destroy());
});
server.listen(0, "127.0.0.1", () => {
  console.log(String((server.address() as { port: number }).port));
});
process.stdin.on("data", () => {});
process.stdin.on("end", () => process.exit(0));
