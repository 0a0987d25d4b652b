// Drives the kindex console in Debian's headless Chromium (playwright-core; no browser download): sign in, create a
// collection (seeing the API's validation message at its field first), drag and drop a PDF and a Markdown file,
// wait for `indexed`, open the PDF's chunks, run a query, see a citation, render an answer's <CIT /> tag, edit a
// document's attributes and access list (the API's 422 at the field first), run a filtered query (a refused filter's
// message at the filter box), reindex and watch the job, check 375 px, then delete. Saves screenshots of the main
// screens.
// Run by tests/e2e/test_console_browser.py with KINDEX_URL, KINDEX_KEY, KINDEX_OTHER_TENANT_KEY, KINDEX_QUERY_KEY,
// CONSOLE_PDF, CONSOLE_MD, SCREENSHOT_DIR.
import { mkdirSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { chromium } from "playwright-core";

const base = process.env.KINDEX_URL;
const key = process.env.KINDEX_KEY;
const otherKey = process.env.KINDEX_OTHER_TENANT_KEY; // an admin key of another tenant
const queryKey = process.env.KINDEX_QUERY_KEY; // a query key of the first tenant
const pdf = process.env.CONSOLE_PDF;
const md = process.env.CONSOLE_MD;
const shots = process.env.SCREENSHOT_DIR;
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
mkdirSync(shots, { recursive: true });

const steps = [];
const step = async (name, work) => {
  const started = Date.now();
  await work();
  steps.push(`ok ${name} (${Date.now() - started} ms)`);
  console.log(`ok ${name} (${Date.now() - started} ms)`);
};
const check = (condition, message) => { if (!condition) throw new Error(message); };

// A fresh profile per run (Playwright passes it as --user-data-dir).
const context = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), "kindex-chromium-")), {
  executablePath, headless: true, viewport: { width: 1440, height: 900 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const problems = [];
const requests = [];
let page;
try {
  page = context.pages()[0] ?? await context.newPage();
  page.setDefaultTimeout(30000);
  // The test provokes 401, 403 and 422 answers on purpose; Chromium logs every 4xx fetch as an error.
  page.on("console", (m) => {
    if (m.type() === "error" && !/^Failed to load resource: the server responded with a status of 4\d\d/.test(m.text())) {
      problems.push(`console: ${m.text()}`);
    }
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("request", (r) => requests.push(r.url()));
  await page.addInitScript(() => {
    document.addEventListener("securitypolicyviolation", (e) =>
      console.error(`CSP violation: ${e.violatedDirective} ${e.blockedURI}`));
  });
  const collection = `console-e2e-${Date.now()}`;
  const pdfName = basename(pdf);
  const mdName = basename(md);

  await step("sign in", async () => {
    await page.goto(`${base}/console`);
    await page.getByLabel("API key").fill("kdx_not_a_key");
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByText("This key is not valid.").waitFor();
    check(!(await page.getByRole("button", { name: "Sign out" }).isVisible())
      && !(await page.getByRole("navigation", { name: "Sections" }).isVisible()), "signed out: no navigation");
    await page.screenshot({ path: join(shots, "01-sign-in.png") });
    await page.getByLabel("API key").fill(key);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Collections" }).waitFor();
    const stored = await page.evaluate(() => ({ session: sessionStorage.getItem("kindex.apiKey"),
      local: localStorage.length, cookie: document.cookie }));
    check(stored.session === key && stored.local === 0 && stored.cookie === "", "key only in sessionStorage");
  });

  await step("create a collection, with the API's message at the field", async () => {
    await page.getByRole("link", { name: "New collection" }).click();
    await page.getByLabel("Id").fill(collection);
    await page.getByLabel("Title").fill("Console test");
    await page.getByLabel("Chunk size").fill("200000");
    await page.getByRole("button", { name: "Create collection" }).click();
    const fieldError = page.locator("#f-chunking_max_size-error");
    await fieldError.filter({ hasText: "chunking_max_size" }).waitFor();
    await page.screenshot({ path: join(shots, "02-collection-validation.png") });
    await page.getByLabel("Chunk size").fill("800");
    await page.getByLabel("Query groups").fill("staff, hr");
    check(await page.getByLabel("Document access").inputValue() === "optional", "document access: optional by default");
    await page.getByRole("button", { name: "Create collection" }).click();
    await page.getByRole("heading", { name: /Console test/ }).waitFor();
    check(decodeURIComponent(new URL(page.url()).hash) === `#/collections/${collection}`, "on the new collection");
  });

  await step("drag and drop three files, wait for indexed and failed, filter, retry", async () => {
    // The third is a PDF named .txt: kindex checks content, so it fails with a reason the list shows.
    const pdfBytes = readFileSync(pdf).toString("base64");
    const files = [[pdfName, "application/pdf", pdfBytes], [mdName, "text/markdown", readFileSync(md).toString("base64")],
      ["not-text.txt", "text/plain", pdfBytes]];
    const drop = await page.evaluateHandle((list) => {
      const transfer = new DataTransfer();
      for (const [name, type, b64] of list) {
        const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        transfer.items.add(new File([bytes], name, { type }));
      }
      return transfer;
    }, files);
    await page.dispatchEvent(".drop", "dragover", { dataTransfer: drop });
    await page.dispatchEvent(".drop", "drop", { dataTransfer: drop });
    for (const name of [pdfName, mdName]) {
      await page.locator(`li[data-file="${name}"] .badge.indexed`).waitFor({ timeout: 180000 });
    }
    await page.locator('li[data-file="not-text.txt"] .badge.failed').waitFor({ timeout: 180000 });
    const sinceRefresh = requests.length;
    await page.getByRole("button", { name: "Refresh" }).click();
    await page.locator(`tr[data-document="${pdfName}"] .badge.indexed`).waitFor();
    await page.locator(".counts .badge.failed").waitFor();
    const counts = (await page.locator(".counts").textContent()).replace(/\s+/g, " ");
    check(counts.includes("3 documents") && counts.includes("indexed 2") && counts.includes("failed 1"),
      `counts by status: ${counts}`);
    // The list and the counts come from the list's summaries: no request reads one document.
    const perDocument = requests.slice(sinceRefresh).filter((u) => /\/documents\/[^/]+$/.test(new URL(u).pathname));
    check(perDocument.length === 0, `no GET per document: ${perDocument.join(", ")}`);
    await page.screenshot({ path: join(shots, "03-documents.png"), fullPage: true });
    await page.locator("#status-filter").selectOption("failed");
    const failure = page.locator('tr[data-document="not-text.txt"] td.failure');
    await failure.filter({ hasText: "UnsupportedType" }).waitFor();
    check(await page.locator("tbody tr").count() === 1, "only the failed document is listed");
    await page.locator('tr[data-document="not-text.txt"]').getByRole("button", { name: "Retry" }).click();
    await page.getByRole("link", { name: "Watch the job" }).waitFor();
    await page.locator("#status-filter").selectOption("in_progress");
    await page.getByText("No in progress documents").waitFor();
    await page.locator("#status-filter").selectOption("indexed");
    await page.locator(`tr[data-document="${mdName}"]`).waitFor();
    check(await page.locator("tbody tr").count() === 2, "the two indexed documents are listed");
  });

  await step("open the PDF's chunks", async () => {
    await page.locator(`tr[data-document="${pdfName}"]`).getByRole("link", { name: "Chunks" }).click();
    await page.getByRole("heading", { name: "Chunks" }).waitFor();
    await page.locator(".chunk").first().waitFor();
    const meta = (await page.locator(".chunk .meta").first().textContent()).replace(/\s+/g, " ");
    check(/#0 chars 0–\d+ · page 1/.test(meta), `chunk offsets and page shown: ${meta}`);
    await page.screenshot({ path: join(shots, "04-chunks.png") });
  });

  await step("run a query and see a citation", async () => {
    await page.getByRole("link", { name: "Query" }).click();
    await page.getByLabel("Collections").fill(collection);
    await page.getByLabel("Query", { exact: true }).fill("document layout conversion");
    await page.getByLabel("Groups").fill("staff");
    await page.getByLabel("User").fill("ann");
    await page.getByRole("button", { name: "Run query" }).click();
    await page.locator(".result").first().waitFor();
    const first = await page.locator(".result .cit").first().innerText();
    check(first === "[1]", `citation number shown: ${first}`);
    await page.locator("text=/timings: .*ms/").waitFor();
    await page.getByText("Context block").click();
    const contextBlock = await page.locator("#context-block").innerText();
    check(contextBlock.includes("<CIT"), "the context block asks for <CIT /> tags");
    const cited = await page.locator(".result .meta a").first().innerText();
    const citedId = await page.locator(".result .meta .muted").first().innerText();
    await page.getByLabel("Paste the LLM's answer").fill(
      `Docling converts documents <CIT ${citedId.trim().split("/").slice(1).join("/")} />.`);
    await page.getByRole("button", { name: "Render citations" }).click();
    await page.locator(".answer-html sup, .answer-html a").first().waitFor();
    const rendered = await page.locator(".answer-html").innerText();
    check(rendered.includes(cited.trim()) || rendered.includes("1"), `footnote rendered: ${rendered}`);
    await page.screenshot({ path: join(shots, "05-query.png"), fullPage: true });
  });

  await step("a user outside the groups is refused", async () => {
    await page.getByLabel("Groups").fill("nobody");
    await page.getByRole("button", { name: "Run query" }).click();
    await page.locator(".query-out .error").filter({ hasText: "forbidden" }).waitFor();
  });

  await step("edit a document's attributes and access, then a filtered query", async () => {
    // Given the Markdown document's view
    const docView = `#/collections/${encodeURIComponent(collection)}/documents/${encodeURIComponent(mdName)}`;
    await page.goto(`${base}/console${docView}`);
    await page.getByRole("heading", { name: "Attributes and access" }).waitFor();
    // When an attribute key the API refuses is saved / Then its 422 message is shown at the attributes field
    await page.getByLabel("Attributes (JSON)").fill('{"1st": "x"}');
    await page.getByRole("button", { name: "Save attributes and access" }).click();
    await page.locator("#d-attributes-error").filter({ hasText: "attributes" }).waitFor();
    // When valid attributes and an access list are saved
    await page.getByLabel("Attributes (JSON)").fill('{"region": "eu", "year": 2024, "tags": ["guide"]}');
    await page.getByLabel("Groups whose users may see it").fill("staff");
    await page.getByRole("button", { name: "Save attributes and access" }).click();
    await page.locator('[data-saved="metadata"]').waitFor();
    check(await page.locator("#d-attributes-error").innerText() === "", "no error left at the field");
    // Then, once the index has them (no re-embedding: the document is indexed again), the view shows them
    const deadline = Date.now() + 120000;
    for (;;) {
      await page.reload();
      await page.getByRole("heading", { name: "Attributes and access" }).waitFor();
      if (await page.locator(".facts .badge.indexed").count()) break;
      check(Date.now() < deadline, "the document is indexed again after its attributes changed");
      await page.waitForTimeout(500);
    }
    const shown = JSON.parse(await page.getByLabel("Attributes (JSON)").inputValue());
    check(shown.region === "eu" && shown.year === 2024 && shown.tags[0] === "guide", `attributes shown: ${
      JSON.stringify(shown)}`);
    check(await page.getByLabel("Groups whose users may see it").inputValue() === "staff", "access list shown");
    // And the list shows them at a glance
    await page.goto(`${base}/console#/collections/${encodeURIComponent(collection)}`);
    await page.locator(`tr[data-document="${mdName}"] .attributes`).filter({ hasText: "region=eu" }).waitFor();
    // When the playground runs a filtered query for a staff user / Then only the matching document comes back
    await page.getByRole("link", { name: "Query" }).click();
    await page.getByLabel("Collections").fill(collection);
    await page.getByLabel("Query", { exact: true }).fill("extract text");
    await page.getByLabel("Groups").fill("staff");
    await page.getByLabel("User").fill("ann");
    await page.getByLabel("Attribute filter (JSON)").fill('{"region": "eu", "year": {"$gte": 2020}}');
    await page.getByRole("button", { name: "Run query" }).click();
    await page.locator(".result").first().waitFor();
    const found = await page.locator(".result .meta .muted").allInnerTexts();
    check(found.length > 0 && found.every((t) => t.trim().endsWith(`/${mdName}`)), `only ${mdName}: ${found}`);
    // And a filter the API refuses shows its message at the filter box, naming the place
    await page.getByLabel("Attribute filter (JSON)").fill('{"year": {"$gte": "2020"}}');
    await page.getByRole("button", { name: "Run query" }).click();
    await page.locator("#q-filter-error").filter({ hasText: "filters.attributes.year.$gte" }).waitFor();
    check(await page.locator(".query-out .result").count() === 0, "no results shown for a refused filter");
    // And a filter nothing matches answers nothing; not JSON is refused before any request
    await page.getByLabel("Attribute filter (JSON)").fill('{"region": "us"}');
    await page.getByRole("button", { name: "Run query" }).click();
    await page.locator(".query-out .empty").waitFor();
    await page.getByLabel("Attribute filter (JSON)").fill("{region: eu}");
    await page.getByRole("button", { name: "Run query" }).click();
    await page.locator("#q-filter-error").filter({ hasText: "not valid JSON" }).waitFor();
    await page.getByLabel("Attribute filter (JSON)").fill("");
    // And removing the access list (null, after a confirmation) leaves the document without one
    await page.goto(`${base}/console${docView}`);
    await page.getByRole("button", { name: "Remove access list" }).click();
    await page.getByRole("button", { name: "Remove access list" }).last().click();
    await page.locator('[data-saved="metadata"]').waitFor();
    check(await page.getByLabel("Groups whose users may see it").inputValue() === "", "no access list left");
    check(!(await page.getByRole("button", { name: "Remove access list" }).isVisible()), "nothing left to remove");
  });

  await step("reindex and watch the job", async () => {
    await page.goto(`${base}/console#/collections/${encodeURIComponent(collection)}/reindex`);
    await page.getByRole("button", { name: "Start reindex" }).click();
    await page.locator(".job [role=status]").filter({ hasText: /^completed/ }).waitFor({ timeout: 120000 });
    await page.screenshot({ path: join(shots, "06-reindex-job.png") });
    await page.getByRole("link", { name: "Jobs" }).click();
    await page.locator(".job").first().waitFor();
  });

  await step("the usage page shows what the tenant stores and its limits", async () => {
    const usage = await (await fetch(`${base}/v1/usage`, { headers: { Authorization: `Bearer ${key}` } })).json();
    await page.getByRole("link", { name: "Usage" }).click();
    await page.getByRole("heading", { name: "Usage" }).waitFor();
    const documents = page.locator('tr[data-quota="documents"] td').first();
    check((await documents.textContent()) === usage.documents.toLocaleString("en-US"), "documents used shown");
    check(usage.documents > 0, "the tenant's documents are counted");
    check((await page.locator('[data-metered="queries"] strong').textContent()) ===
      usage.queries_today.toLocaleString("en-US"), "queries today shown");
    await page.screenshot({ path: join(shots, "06b-usage.png") });
  });

  await step("hostile ids are shown as text and still navigable", async () => {
    // Given a collection and a document whose ids look like markup, a percent-escape and a fragment
    const hostile = `x <img src=x onerror="window.pwned=1"> ü %2F #?${Date.now()}`;
    const doc = "<svg onload=\"window.pwned=2\"> 100% .md";
    const call = (method, path, body) => fetch(`${base}${path}`, { method, body: body && JSON.stringify(body),
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" } });
    const enc = encodeURIComponent;
    check((await call("PUT", `/v1/collections/${enc(hostile)}`, { allow_guests: true })).status === 201, "created");
    check((await call("PUT", `/v1/collections/${enc(hostile)}/documents/${enc(doc)}`,
      { content: "Hostile ids stay text." })).status === 201, "document created");
    try {
      await page.getByRole("link", { name: "Collections" }).click();
      await page.getByRole("link", { name: hostile, exact: true }).click();
      await page.getByRole("heading", { name: hostile }).waitFor();
      await page.getByRole("link", { name: doc, exact: true }).first().click();
      await page.locator(".chunk pre").filter({ hasText: "Hostile ids stay text." }).waitFor({ timeout: 60000 })
        .catch(async () => { await page.reload(); await page.locator(".chunk pre").waitFor(); });
      check(await page.evaluate(() => window.pwned === undefined), "no markup from an id ran");
      check(await page.getByRole("heading", { name: doc }).count() === 1, "the document id is the heading");
    } finally {
      await call("DELETE", `/v1/collections/${enc(hostile)}`);
    }
  });

  await step("usable at 375 px and by keyboard", async () => {
    await page.setViewportSize({ width: 375, height: 800 });
    await page.goto(`${base}/console#/collections/${encodeURIComponent(collection)}`);
    await page.locator(`tr[data-document="${pdfName}"]`).waitFor();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth);
    check(overflow <= 376, `no page-wide horizontal scroll at 375 px (${overflow})`);
    await page.screenshot({ path: join(shots, "07-documents-375px.png"), fullPage: true });
    await page.setViewportSize({ width: 1440, height: 900 });
    await page.reload();
    await page.locator(`tr[data-document="${pdfName}"]`).waitFor();
    await page.keyboard.press("Tab");
    const focused = await page.evaluate(() => document.activeElement.outerHTML.slice(0, 80));
    check(focused.includes('class="skip"'), `first Tab: skip link (${focused})`);
    await page.keyboard.press("Tab");
    check(await page.evaluate(() => document.activeElement.textContent) === "Collections", "then the navigation");
  });

  await step("delete the document and the collection", async () => {
    await page.locator(`tr[data-document="${mdName}"]`).getByRole("button", { name: `Delete ${mdName}` }).click();
    await page.getByRole("button", { name: "Delete document" }).click();
    await page.getByText(`Deleted ${mdName}.`).waitFor();
    check(await page.locator(`tr[data-document="${mdName}"]`).count() === 0, "the document is gone");
    await page.getByRole("button", { name: "Delete collection" }).click();
    await page.getByRole("button", { name: "Delete collection" }).last().click();
    await page.getByRole("heading", { name: "Collections" }).waitFor();
    await page.waitForLoadState("networkidle");
    check(await page.getByRole("link", { name: collection, exact: true }).count() === 0, "the collection is gone");
  });

  await step("sign out forgets the key", async () => {
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByLabel("API key").waitFor();
    check(await page.evaluate(() => sessionStorage.getItem("kindex.apiKey")) === null, "key removed");
  });

  await step("another tenant's key sees its own collection of the same id; a query key gets the playground", async () => {
    // Given the same collection id in two tenants, with different titles
    const same = `same-id-${Date.now()}`;
    const put = (k, title) => fetch(`${base}/v1/collections/${same}`, { method: "PUT",
      headers: { Authorization: `Bearer ${k}` }, body: JSON.stringify({ title }) });
    check((await put(key, "Tenant default")).status === 201 && (await put(otherKey, "Tenant other")).status === 201,
      "both created");
    try {
      // When the other tenant signs in in the same tab / Then it sees its own collection, nothing of the first
      await page.getByLabel("API key").fill(otherKey);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.getByRole("link", { name: same, exact: true }).click();
      await page.getByRole("heading", { name: /Tenant other/ }).waitFor();
      check(await page.getByText("Tenant default").count() === 0, "no data of the other tenant");
      await page.getByRole("button", { name: "Sign out" }).click();
      // And a query key lands on the query playground; the collections screen says why it is refused
      await page.getByLabel("API key").fill(queryKey);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.getByRole("heading", { name: "Query playground" }).waitFor();
      await page.getByRole("link", { name: "Collections" }).click();
      await page.locator(".error").filter({ hasText: "forbidden" }).waitFor();
      await page.getByRole("button", { name: "Sign out" }).click();
    } finally {
      await fetch(`${base}/v1/collections/${same}`, { method: "DELETE", headers: { Authorization: `Bearer ${key}` } });
      await fetch(`${base}/v1/collections/${same}`, { method: "DELETE",
        headers: { Authorization: `Bearer ${otherKey}` } });
    }
  });

  // Everything the page fetched: its own files, the /v1 API, and the upload URLs the API handed out.
  const origin = new URL(base).origin;
  const stray = requests.filter((u) => {
    const url = new URL(u);
    return url.origin !== origin || !/^\/(console(\/[a-z0-9.-]+)?|v1\/.*|uploads\/.*)$/.test(url.pathname)
      || url.href.includes(key);
  });
  check(stray.length === 0, `requests outside the console, /v1 and uploads: ${stray.join(", ")}`);
  check(problems.length === 0, `browser errors: ${problems.join(" | ")}`);
  console.log(JSON.stringify({ ok: true, steps: steps.length, requests: requests.length }));
} catch (error) {
  if (page) await page.screenshot({ path: join(shots, "failure.png"), fullPage: true }).catch(() => {});
  console.log(`FAIL ${error.message}`);
  console.log(`browser problems: ${problems.join(" | ")}`);
  process.exitCode = 1;
} finally {
  await context.close();
}
