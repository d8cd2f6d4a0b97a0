// just-bash side of the shell benchmark (bench/shell). One warm node
// process; the Rust harness copies this file next to the `node_modules`
// holding just-bash and talks to it with one JSON object per line:
//
//   {"op":"load","cwd":"/workspace","files":{"/workspace/a.txt":"..."}}
//       -> {"ok":true}                 input files of the next runs
//   {"op":"run","script":"..."}        -> {"ns":N,"stdout":..,"stderr":..,"status":..}
//       a fresh `new Bash({ files, cwd })` (the package's default in-memory
//       filesystem, as an agent framework makes one per task), built before
//       the clock starts; `ns` times `exec` alone with process.hrtime.
//   {"op":"check","script":"..."}      -> same reply, untimed, on the
//       instance of the last run (to inspect the files it left)
import { Bash } from "just-bash";
import { createInterface } from "node:readline";

// The benchmark's scripts are long loops and large inputs: lift the
// per-exec budgets so only the work is measured.
const executionLimits = {
  maxCommandCount: Infinity,
  maxLoopIterations: Infinity,
  maxExecutionTimeMs: 600_000,
  maxOutputSize: 256 * 1024 * 1024,
  maxFileSystemBytes: 1024 * 1024 * 1024,
};

let files = {};
let cwd = "/";
let last = null;

async function exec(bash, script) {
  try {
    const start = process.hrtime.bigint();
    const r = await bash.exec(script);
    const ns = Number(process.hrtime.bigint() - start);
    return { ns, stdout: r.stdout, stderr: r.stderr, status: r.exitCode };
  } catch (e) {
    return { ns: 0, stdout: "", stderr: String((e && e.stack) || e), status: -1 };
  }
}

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  const msg = JSON.parse(line);
  let reply;
  if (msg.op === "load") {
    files = msg.files;
    cwd = msg.cwd;
    reply = { ok: true };
  } else if (msg.op === "run") {
    try {
      last = new Bash({ files, cwd, executionLimits });
      reply = await exec(last, msg.script);
    } catch (e) {
      reply = { ns: 0, stdout: "", stderr: String((e && e.stack) || e), status: -1 };
    }
  } else if (msg.op === "check") {
    reply = last ? await exec(last, msg.script) : { ns: 0, stdout: "", stderr: "no run yet", status: -1 };
  } else {
    reply = { error: `unknown op ${msg.op}` };
  }
  process.stdout.write(JSON.stringify(reply) + "\n");
}
