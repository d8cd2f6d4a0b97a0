// Drives the page of `kubectl computer ui` in a real headless chromium
// (playwright-core from UI_NODE_MODULES, Debian's chromium at CHROMIUM):
// runs a task in the shell and container columns, watching that output
// arrives while each run is still going; saves a screenshot; opens the
// file it made in the tree and previews it; runs an ES module in the
// JavaScript column. Prints one JSON object of what the page showed.
//
// Usage: node drive.mjs URL SCREENSHOT.png
import { createRequire } from "node:module";

const require = createRequire(process.env.UI_NODE_MODULES + "/");
const { chromium } = require("playwright-core");
const [url, screenshot] = process.argv.slice(2);

const TASK = 'echo "first line"; sleep 2; echo "second line"; echo "a warning" >&2; echo "made by the task" > report.txt; exit 3';

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  // Debian's chromium as root has no user namespaces for its own sandbox.
  args: ["--no-sandbox", "--disable-gpu"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction(() => document.getElementById("computer").value !== "");
  await page.fill("#script", TASK);
  await page.click("#run");

  // Live: the first line shows while the run is still going.
  const live = {};
  for (const rt of ["shell", "container"]) {
    const col = `.column[data-runtime=${rt}]`;
    await page.waitForFunction((c) => document.querySelector(c + " .output")?.textContent.includes("first line"), col, { timeout: 60000 });
    live[rt] = await page.$eval(col, (c) => !c.dataset.done && !c.querySelector(".output").textContent.includes("second line"));
  }
  await page.waitForSelector("body[data-state=done]", { timeout: 120000 });
  const columns = await page.$$eval(".column", (cols) => cols.map((c) => ({
    runtime: c.dataset.runtime,
    exit: c.dataset.exit,
    ms: Number(c.dataset.ms),
    status: c.querySelector(".status").textContent,
    output: c.querySelector(".output").textContent,
    stderr: [...c.querySelectorAll(".stderr")].map((s) => s.textContent).join(""),
    // stdout and stderr are two streams: only each one's own order is kept.
    stdout: [...c.querySelectorAll(".output > span:not(.stderr)")].map((s) => s.textContent).join(""),
  })));
  await page.screenshot({ path: screenshot, fullPage: true });

  // The tree, refreshed after the runs, and the report's preview.
  await page.waitForSelector("#tree .entry");
  const tree = await page.$$eval("#tree > li > .entry", (es) => es.map((e) => e.textContent));
  await page.click("#tree .entry >> text=report.txt");
  await page.waitForSelector("#preview pre");
  const preview = await page.textContent("#preview pre");

  // The JavaScript column alone, with a module.
  await page.uncheck("input.runtime[value=shell]");
  await page.uncheck("input.runtime[value=container]");
  await page.check("input.runtime[value=javascript]");
  await page.fill("#script", "export default () => ({ answer: 6 * 7 });");
  await page.click("#run");
  await page.waitForSelector("body[data-state=done]", { timeout: 60000 });
  const js = await page.$eval(".column[data-runtime=javascript]", (c) => ({
    exit: c.dataset.exit,
    output: c.querySelector(".output").textContent,
  }));
  console.log(JSON.stringify({ live, columns, tree, preview, js, errors }));
} finally {
  await browser.close();
}
