// The bare runtime start of (e) and (h): `deno run empty.ts` / `bun run empty.ts`.
