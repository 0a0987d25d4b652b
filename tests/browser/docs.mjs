// Opens the API's reference page (/docs, Swagger UI) in Debian's headless Chromium (playwright-core) and checks that
// it runs under its own strict policy: the operations render and are styled, "Try it out" reaches this deployment,
// and there is no browser error, no CSP violation and no request to another origin or outside /docs, the OpenAPI
// document and /v1. Run by tests/e2e/test_docs_page.py with KINDEX_URL and CHROMIUM; prints one JSON line.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const base = process.env.KINDEX_URL;
const context = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), "kindex-chromium-")), {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium", headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
const problems = [];
const requests = [];
let result = { ok: false };
try {
  const page = await context.newPage();
  // Registered through the DevTools protocol, before any page script: not subject to the page's policy.
  await page.addInitScript(() => {
    window.__violations = [];
    document.addEventListener("securitypolicyviolation",
      (e) => window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  page.on("console", (m) => { if (m.type() === "error") problems.push(`console: ${m.text()}`); });
  page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
  page.on("request", (r) => requests.push(r.url()));
  page.on("response", (r) => { if (r.status() >= 400 && !r.url().includes("/v1/collections")) {
    problems.push(`HTTP ${r.status()} ${r.url()}`);
  } });
  await page.goto(`${base}/docs`);
  await page.waitForSelector(".opblock", { timeout: 30000 });
  const operations = await page.locator(".opblock").count();
  const styled = await page.evaluate(() => getComputedStyle(document.querySelector(".swagger-ui .opblock")).borderRadius);
  const beforeTrying = [...problems];
  // "Try it out" on the collection list: the request goes to this server (401 without a key, shown on the page)
  const index = await page.evaluate(() => [...document.querySelectorAll(".opblock-get")].findIndex(
    (block) => block.querySelector(".opblock-summary-path")?.getAttribute("data-path") === "/v1/collections"));
  const list = page.locator(".opblock-get").nth(index);
  await list.locator(".opblock-summary").click();
  await list.locator("button.try-out__btn").click();
  await list.locator("button.execute").click();
  await list.locator(".responses-table.live-responses-table").waitFor({ timeout: 15000 });
  const status = (await list.locator(".live-responses-table tbody .response-col_status").first().innerText()).trim();
  const violations = await page.evaluate(() => window.__violations);
  const outside = requests.filter((u) => !u.startsWith(`${base}/docs`) && !u.startsWith(`${base}/v1/`)
    && u !== `${base}/console/favicon.svg`);
  // The one error after "Try it out" is the browser's note of the 401 answer itself
  const after = problems.slice(beforeTrying.length).filter((p) => !p.includes("status of 401"));
  result = { ok: beforeTrying.length === 0 && after.length === 0 && violations.length === 0 && outside.length === 0 && operations > 10
    && styled === "4px" && status.startsWith("401"), operations, styled, status, violations, outside, problems };
} finally {
  await context.close();
}
console.log(JSON.stringify(result));
process.exit(result.ok ? 0 : 1);
