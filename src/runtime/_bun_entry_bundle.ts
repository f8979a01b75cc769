/**
 * The pre-bundled worker entry of Bun workers (`workers/entry_bundle.js`),
 * built by scripts/build_bun_entry.ts: generated, do not edit. After a
 * change to any source listed below, rebuild it with
 * `node_modules/.bin/deno run -A scripts/build_bun_entry.ts` and commit
 * both files: tests/runtime/bun_entry_test.ts fails until then, and Bun
 * workers run a bundle built per process meanwhile.
 *
 * @module
 */

/** The checked-in bundle and what it was built from. */
export const BUN_ENTRY_BUNDLE: {
  /** The bundle, relative to airlock's root. */
  readonly file: string;
  /** The SHA-256 (hex) of its bytes. */
  readonly sha256: string;
  /** The Bun that built it. */
  readonly bun: string;
  /** Each source (relative to airlock's root) and its SHA-256. */
  readonly sources: readonly (readonly [string, string])[];
} = {
  file: "workers/entry_bundle.js",
  sha256: "6444ab87ea006cc7e268b20b836cbcf23a01be736c49cd4f090da82024112b77",
  bun: "1.4.5",
  sources: [
    [
      "src/errors.ts",
      "7c431fbe177640a03ffba5859e9eebcd9ec2f4cd7bb63987d4a43295b2b7d6f6",
    ],
    [
      "src/protocol/_decode_budget.ts",
      "afa6845646fd436a8e9ecc2c6dd66c6ac13ca3cd920c713f77a068343ef5a2be",
    ],
    [
      "src/protocol/_refusal.ts",
      "87c073ccee355ddfd149f2ca0e1f76ff8e6fafd61540f3a066f46f8af3a41fd8",
    ],
    [
      "src/protocol/_shapes.ts",
      "afd9e92d8a30509934c04a1adc308c5b275e4ee0400f5611ecb7eb7a84a23f83",
    ],
    [
      "src/protocol/_tags.ts",
      "b45d0cd613814645bcfd6b4e19ccccc44ea7e4869c1f6fa2f18f92346a221fb8",
    ],
    [
      "src/protocol/decode_value.ts",
      "141598de7baa9ab707221fc13e7c7b68bdabaddda096ec5a1c6a502c432c70a0",
    ],
    [
      "src/protocol/encode_message.ts",
      "1e0669745be9b7605025cfb559b9a94c4662b665dcd7cf0f3ba9721bc4a7f236",
    ],
    [
      "src/protocol/encode_value.ts",
      "9b0f39ef7cc0f3dc647818299391396642a965bf1fb43e097d5b63b7c9a90f8c",
    ],
    [
      "src/protocol/frame_header.ts",
      "f7dac3ff0ee06212c494d73f6293086d6ca544f448827d46f4e3568d03ffaf8e",
    ],
    [
      "src/protocol/frame_reader.ts",
      "8bec68cd2aa60fce868d0a9cf73baf704029098704d6164117598251116b7e31",
    ],
    [
      "src/protocol/messages.ts",
      "61f5fb6632826f60c63cd36d22ea08342a1c1479ee9510d9fc21e11fdd20c1a7",
    ],
    [
      "src/protocol/register_type.ts",
      "aec7b428dd1618c372e4377f54782517280417ecb69b6ed5cc15e83e44637c16",
    ],
    [
      "src/protocol/reserved.ts",
      "4d877faeba009c3a5eed357749be1a385df5418a6a3b3a79c63f0f2370427171",
    ],
    [
      "src/protocol/wire_error.ts",
      "fd590c3e455e9ddab6fd75d8c0d2689d057feb6726e7c3823620cca2d82def1f",
    ],
    [
      "src/runtime/_write_queue.ts",
      "e46d1c4e42cc874d9ebd29ea57747df5f7561c4d391f9e0b57c719d80ff9e0b0",
    ],
    [
      "src/runtime/bun.ts",
      "a137c2d7247be48f8d0dfd497075a31c0023d98112f806f3ffe372a7592e16cc",
    ],
    [
      "src/runtime/chunk_reader.ts",
      "518079d9787e70c686a1db367e8abe1df7c1d671ff676d1925cae39d01ce57f2",
    ],
    [
      "src/runtime/deno.ts",
      "9a2075fb30ba6fa056c53e45404cab34be6d8f3eab1ba936fe1384e4dfafead8",
    ],
    [
      "src/runtime/detect.ts",
      "c59e748e85bbc85fe6f2d357142818d52eff467cdbb3a4300e832762b99c33a6",
    ],
    [
      "src/runtime/node_builtins.ts",
      "24d2e6a4a77361d47600c0d9679f06087a2de24dfcdc5fcbbc8e41cb7685c527",
    ],
    [
      "src/runtime/posix_path.ts",
      "628f15c2ef2455ba577cb9b065fc9c45d3719dd619dab85f0d0e4f244bc9c600",
    ],
    [
      "src/runtime/turns.ts",
      "2dc783ea86153476635c73f7cc124c03e9074c10f73769a806cbd7498e27f701",
    ],
    [
      "src/worker/_outbox.ts",
      "9a732664a843983b887f5c6e8b93497970f13bd9fc8480ef2137623e7e618598",
    ],
    [
      "src/worker/_progress.ts",
      "713f020efed856bf881db4a4277ed780734afb69084f68e4cc86ee9558c9568d",
    ],
    [
      "src/worker/_stream_pump.ts",
      "8caa8f499b8101e04ef8a59ba430f8800e1fa9bfc1cb3f2ed187b70a2a5ef8d4",
    ],
    [
      "src/worker/chmod_fallback.ts",
      "b9456eff130162c37cadc1f91ea91764be7b0961e752d8b9216b231b7c9fbd40",
    ],
    [
      "src/worker/define_worker.ts",
      "3fa2406c42aebfb43e5853273ad21f68f304d9ae9d4bd45893820b4546fe94eb",
    ],
    [
      "src/worker/main.ts",
      "2329e30c76810cfa91331c4496ba59664ab5904e75245e1c24a61d3cf7b9b6c8",
    ],
    [
      "src/worker/serve.ts",
      "c790ddbe9ed5d20fad00d05864a0e11d856655fc6ea448be6871886ad5b2c172",
    ],
    [
      "src/worker/stdout_guard.ts",
      "4a340b56ddd85f2d3a37433a389b84739c99a53ab978d27bd371b344ce008db1",
    ],
    [
      "src/worker/watchdog.ts",
      "97bbd73528a9cbd8e59ff817ae72b745e1a7075625c53b704a53304864edd153",
    ],
    [
      "workers/entry.ts",
      "acc150f257669045942ee87916515be996a48eac1b0f752984b496596a2532f1",
    ],
  ],
};
