// The lab console's page: the guide, the Workstation's terminal, the handler.py editor,
// Check and Grade. Every request carries the console's cookie (see access.py).
import { Terminal } from "./xterm/xterm.mjs";
import { FitAddon } from "./xterm/addon-fit.mjs";

const $ = (id) => document.getElementById(id);
const body = document.body;
let lang = body.dataset.lang;

// ---- talking to the console --------------------------------------------------------

// Every URL is under the console's own path: "/" on its own, /user/NAME/ under a course's hub,
// whose login also asks for its XSRF token on every call a script makes.
const base = body.dataset.base || "/";

async function api(method, path, payload) {
  const options = { method, credentials: "same-origin", headers: {} };
  if (body.dataset.xsrf) options.headers["X-XSRFToken"] = body.dataset.xsrf;
  path = base + path.replace(/^\//, "");
  if (payload !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(payload);
  }
  const response = await fetch(path, options);
  const data = await response.json().catch(() => ({ error: `the console answered ${response.status}` }));
  if (!response.ok) {
    const error = new Error(data.error || `the console answered ${response.status}`);
    error.status = response.status;
    error.data = data;
    throw error;
  }
  return data;
}

function show(target, ...nodes) {
  target.replaceChildren(...nodes);
}

function element(tag, text, attributes = {}) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  return node;
}

function lines(list) {
  // Focusable: a long output scrolls, and the keyboard must reach it.
  return element("pre", list.join("\n"), { class: "output", tabindex: "0" });
}

function busy(button, doing) {
  button.disabled = doing;
  button.setAttribute("aria-busy", doing ? "true" : "false");
}

// ---- links to the site and the management UI ----------------------------------------
// On the learner's machine they are other ports of the same host. Behind a forwarded
// address such as Codespaces' (NAME-8080.app.github.dev), each port has a name of its own.

function linkTo(port) {
  const forwarded = !location.port && location.hostname.match(/^(.+)-\d+(\..+)$/);
  if (forwarded) return `${location.protocol}//${forwarded[1]}-${port}${forwarded[2]}/`;
  return `${location.protocol}//${location.hostname}:${port}/`;
}
$("site-link").href = body.dataset.siteUrl || linkTo(body.dataset.sitePort);
if ($("management-link")) { // none when the lab runs no management UI: the page says so instead
  $("management-link").href = body.dataset.managementUrl || linkTo(body.dataset.managementPort);
}

// ---- the guide ------------------------------------------------------------------------

const unitPicker = $("unit");

function unitKey() {
  return unitPicker.value;
}

function unitName(key) {
  return /^\d+$/.test(key) ? `unit ${key}` : `lesson ${key}`;
}

function labelUnits() {
  for (const option of unitPicker.options) {
    const title = option.dataset[lang === "ja" ? "titleJa" : "titleEn"];
    option.textContent = option.dataset.passed === "yes" ? `${title} (passed)` : title;
  }
  $("check").textContent = `Check ${unitName(unitKey())}`;
  $("setup").textContent = `Set up ${unitName(unitKey())}`;
  if ($("solve")) { // off for a graded course (NIGHTJAR_CONSOLE_SOLUTIONS=off); a lesson has none
    $("solve").textContent = `Solve ${unitName(unitKey())}`;
    $("solve").closest(".solution-tools").hidden = !/^\d+$/.test(unitKey());
  }
  const other = lang === "ja" ? "en" : "ja";
  const button = $("language");
  button.textContent = other === "ja" ? "日本語で読む" : "Read in English";
  button.lang = other;
}

function addCopyButtons(guide) {
  for (const block of guide.querySelectorAll("pre > code")) {
    block.parentElement.tabIndex = 0; // a wide block scrolls sideways: the keyboard must reach it
    const button = element("button", "Copy", { type: "button", class: "copy" });
    const note = element("span", "", { class: "copied", role: "status" });
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(block.textContent);
        note.textContent = "Copied";
      } catch {
        // No clipboard (an insecure page): select the text, for Ctrl+C.
        getSelection().selectAllChildren(block);
        note.textContent = "Selected: press Ctrl+C to copy";
      }
      setTimeout(() => { note.textContent = ""; }, 3000);
    });
    const bar = element("div", undefined, { class: "code-tools" });
    bar.append(button, note);
    block.parentElement.before(bar);
  }
}

// A table or code block wider than the pane scrolls inside its own box, and shows it: a shade
// at its right edge and, where the system shows them, a scrollbar that stays.
function boxTables(guide) {
  for (const table of guide.querySelectorAll("table")) {
    const box = element("div", undefined, { class: "table-box", tabindex: "0" }); // the keyboard scrolls it
    table.replaceWith(box);
    box.append(table);
  }
}

function markWide() {
  for (const box of $("guide").querySelectorAll("pre, .table-box")) {
    box.classList.toggle("wide", box.scrollWidth > box.clientWidth + 1);
  }
}
new ResizeObserver(markWide).observe($("guide"));
$("guide").addEventListener("toggle", markWide, true); // a folded table, opened

async function loadGuide() {
  const guide = $("guide");
  try {
    const found = await api("GET", `api/units/${encodeURIComponent(unitKey())}/guide?lang=${lang}`);
    guide.innerHTML = found.html; // rendered by the console from the lab's own guide; raw HTML escaped
    guide.lang = found.lang;
    addCopyButtons(guide);
    boxTables(guide);
    markWide();
  } catch (error) {
    show(guide, element("p", `The guide could not be loaded: ${error.message}`));
  }
  labelUnits();
}

unitPicker.addEventListener("change", () => {
  show($("check-result"));
  show($("setup-result"));
  hideSolution();
  loadGuide();
});

$("language").addEventListener("click", () => {
  lang = lang === "ja" ? "en" : "ja";
  document.cookie = `nightjar-console-lang=${lang}; path=/; SameSite=Strict`;
  loadGuide();
});

$("setup").addEventListener("click", async () => {
  const key = unitKey();
  if (!confirm(`Set up ${unitName(key)}? The live database, its queue and handler.py go back to`
               + " the unit's start (your handler.py and the database are copied to .backups first).")) {
    return;
  }
  await runScript(key, "setup", $("setup"), $("setup-result"), `Setting up ${unitName(key)}…`,
                  `${unitName(key)} is set up.`);
});

// Set up and Solve: the unit's script run in the Workstation, its lines shown, the editor reloaded.
async function runScript(key, action, button, target, doing, finished) {
  busy(button, true);
  show(target, element("p", doing));
  try {
    const done = await api("POST", `api/units/${encodeURIComponent(key)}/${action}`, { lang });
    const heading = done.status === 0 ? finished : `The ${action} stopped (status ${done.status}).`;
    show(target, element("p", heading[0].toUpperCase() + heading.slice(1)), lines(done.lines));
    await loadHandler({ replace: true });
  } catch (error) {
    show(target, element("p", error.message));
  } finally {
    busy(button, false);
  }
}

$("check").addEventListener("click", async () => {
  const key = unitKey();
  const button = $("check");
  busy(button, true);
  show($("check-result"), element("p", `Checking ${unitName(key)}…`));
  try {
    const checked = await api("POST", `api/units/${encodeURIComponent(key)}/check`, { lang });
    const verdict = checked.done ? "Done" : checked.status === 1 ? "Not done yet" : "Could not check";
    show($("check-result"), element("p", verdict, { class: `verdict ${checked.done ? "pass" : "fail"}` }),
         lines(checked.lines));
    if (checked.done) {
      unitPicker.selectedOptions[0].dataset.passed = "yes";
      labelUnits();
    }
  } catch (error) {
    show($("check-result"), element("p", error.message));
  } finally {
    busy(button, false);
  }
});

// ---- a way out for a stuck learner: the solution, shown or done -------------------------

function hideSolution() {
  if (!$("show-solution")) return;
  show($("solution-result"));
  $("show-solution").textContent = "Show the solution";
  $("show-solution").setAttribute("aria-expanded", "false");
}

function solutionTable(key, rows) {
  const marks = { same: "", changed: "changed", removed: "only yours", added: "only the solution's" };
  const table = element("table", undefined, { class: "checks solution" });
  table.append(element("caption", `Your handler.py beside ${unitName(key)}'s solution; the lines that differ are marked.`));
  const head = element("tr");
  for (const title of ["Difference", "Your handler.py", "The solution's handler.py"]) head.append(element("th", title, { scope: "col" }));
  table.append(head);
  for (const row of rows) {
    const line = element("tr", undefined, { class: `diff-${row.kind}` });
    line.append(element("td", marks[row.kind], { class: "mark" }));
    line.append(element("td", row.mine ?? "", { class: "code" }));
    line.append(element("td", row.theirs ?? "", { class: "code" }));
    table.append(line);
  }
  const box = element("div", undefined, { class: "table-box", tabindex: "0" });
  box.append(table);
  return box;
}

if ($("show-solution")) {
  $("show-solution").addEventListener("click", async () => {
    if ($("show-solution").getAttribute("aria-expanded") === "true") return hideSolution();
    const key = unitKey();
    try {
      const found = await api("GET", `api/units/${encodeURIComponent(key)}/solution`);
      if (!found.changes) {
        show($("solution-result"), element("p", `${unitName(key)[0].toUpperCase()}${unitName(key).slice(1)} asks for no`
                                                + ` change to handler.py: its steps are in Nightjar and the terminal. Solve ${unitName(key)} does them.`));
      } else {
        show($("solution-result"), ...(found.same ? [element("p", "Your handler.py is the solution's already.")] : []),
             solutionTable(key, found.rows));
      }
      $("show-solution").textContent = "Hide the solution";
      $("show-solution").setAttribute("aria-expanded", "true");
    } catch (error) {
      show($("solution-result"), element("p", error.message));
    }
  });

  $("solve").addEventListener("click", async () => {
    const key = unitKey();
    if (!confirm(`Solve ${unitName(key)}? This runs the unit's ./solve (what make solve-unit runs): it does`
                 + " the unit's steps for real on the live lab, and where the unit changes handler.py it replaces yours"
                 + " with the solution's (yours is copied to .backups first).")) {
      return;
    }
    hideSolution();
    await runScript(key, "solve", $("solve"), $("solution-result"), `Solving ${unitName(key)}…`,
                    `${unitName(key)} is solved: check it.`);
  });
}

// ---- the terminal ---------------------------------------------------------------------

// A row of 1.2 times the font: at 1.0 the DOM renderer clips the underscore's pixels
// (basic_ack drawn as "basic ack"), at every zoom.
const term = new Terminal({ cursorBlink: true, fontSize: 14, lineHeight: 1.2, scrollback: 5000,
                            fontFamily: "ui-monospace, 'DejaVu Sans Mono', monospace" });
const fit = new FitAddon();
term.loadAddon(fit);
term.open($("terminal"));
fit.fit();
let socket = null;
let retryDelay = 500;
let told = false; // the console said why the terminal is not there: keep that on the page
let escaped = false; // Esc, then Tab, moves the focus on instead of completing

term.attachCustomKeyEventHandler((event) => {
  if (event.type !== "keydown") return true;
  if (event.key === "Tab" && escaped) {
    escaped = false;
    return false; // the browser moves the focus
  }
  escaped = event.key === "Escape";
  return true;
});

function status(text) {
  $("terminal-status").textContent = text;
}

function send(message) {
  if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  socket = new WebSocket(`${scheme}://${location.host}${base}terminal?rows=${term.rows}&cols=${term.cols}`);
  socket.onmessage = (event) => {
    const [kind, value] = JSON.parse(event.data);
    if (kind === "attached") {
      retryDelay = 500;
      term.reset(); // what the shell showed lately follows
      status(value === "same" ? "Connected to the Workstation: the same shell as before."
                              : "Connected to the Workstation: a new shell.");
    } else if (kind === "stdout") {
      term.write(value);
    } else if (kind === "ended") {
      status(`The shell ended (exit status ${value}); starting a new one…`);
    } else if (kind === "unavailable" || kind === "error") {
      status(value);
      told = true;
    }
  };
  socket.onclose = async () => {
    if (!told) status("Disconnected from the Workstation; connecting again…");
    told = false;
    if (await loginEnded()) return;
    setTimeout(connect, retryDelay);
    retryDelay = Math.min(retryDelay * 2, 5000);
  };
}

// Under a course's hub, a lab started again no longer knows the page's login: the page logs in
// again through the hub (a reload), unless that would lose edits not saved yet.
async function loginEnded() {
  if (!body.dataset.xsrf) return false;
  // Bounded: while the hub starts the lab it may hold a request unanswered.
  const answer = await fetch(base + "api/units", { headers: { "X-XSRFToken": body.dataset.xsrf },
                                                  signal: AbortSignal.timeout(10000) })
    .catch(() => null);
  if (!answer || answer.status !== 403) return false;
  if (!dirty()) {
    location.reload();
    return true;
  }
  status("Your lab started again: copy your handler.py edits, then reload this page to log in to it.");
  return true;
}

term.onData((data) => send(["stdin", data]));
term.onResize(({ rows, cols }) => send(["size", rows, cols]));
new ResizeObserver(() => fit.fit()).observe($("terminal"));
$("screen-reader").addEventListener("change", (event) => {
  term.options.screenReaderMode = event.target.checked;
});
connect();

// ---- the editor -------------------------------------------------------------------------

const editor = $("editor");
let loadedVersion = null;
let loadedText = "";

function dirty() {
  return editor.value !== loadedText;
}

function problemNodes(problem) {
  if (!problem) return [];
  const where = problem.line ? `line ${problem.line}${problem.column ? `, column ${problem.column}` : ""}: ` : "";
  const nodes = [element("p", `Python cannot read it yet: ${where}${problem.message}.`, { class: "problem" })];
  if (problem.line) {
    const go = element("button", `Go to line ${problem.line}`, { type: "button" });
    go.addEventListener("click", () => goToLine(problem.line));
    nodes.push(go);
  }
  return nodes;
}

function goToLine(number) {
  const all = editor.value.split("\n");
  const start = all.slice(0, number - 1).reduce((sum, line) => sum + line.length + 1, 0);
  editor.focus();
  editor.setSelectionRange(start, start + (all[number - 1] || "").length);
}

async function loadHandler({ replace = false } = {}) {
  try {
    const file = await api("GET", "api/files/handler.py");
    markOldGrade(file.version);
    if (file.version === loadedVersion) return;
    if (dirty() && !replace) {
      const note = element("p", "handler.py changed in the Workstation (the terminal?) while you edit it here.");
      const load = element("button", "Load the Workstation's version", { type: "button" });
      load.addEventListener("click", () => loadHandler({ replace: true }));
      show($("save-result"), note, load);
      return;
    }
    const first = loadedVersion === null;
    editor.value = loadedText = file.text;
    loadedVersion = file.version;
    show($("save-result"), ...(first ? [] : [element("p", "The editor shows the Workstation's handler.py as it is now.")]),
         ...problemNodes(file.problem));
  } catch (error) {
    if (error.status !== 404 || loadedVersion === null) show($("save-result"), element("p", error.message));
  }
}

async function save(force = false) {
  const button = $("save");
  busy(button, true);
  try {
    const saved = await api("PUT", "api/files/handler.py", { text: editor.value, version: loadedVersion, force });
    loadedText = editor.value;
    loadedVersion = saved.version;
    markOldGrade(saved.version);
    show($("save-result"), element("p", "Saved handler.py in the Workstation."), ...problemNodes(saved.problem));
  } catch (error) {
    if (error.status === 409) {
      const overwrite = element("button", "Save mine anyway", { type: "button" });
      overwrite.addEventListener("click", () => save(true));
      const load = element("button", "Load the Workstation's version", { type: "button" });
      load.addEventListener("click", () => loadHandler({ replace: true }));
      show($("save-result"), element("p", `${error.message}.`), overwrite, load);
    } else {
      show($("save-result"), element("p", `Not saved: ${error.message}`));
    }
  } finally {
    busy(button, false);
  }
}

let editorEscaped = false;
editor.addEventListener("keydown", (event) => {
  if ((event.ctrlKey || event.metaKey) && event.key === "s") {
    event.preventDefault();
    save();
    return;
  }
  if (event.key === "Tab" && !event.shiftKey && !editorEscaped) {
    event.preventDefault();
    const { selectionStart: start, selectionEnd: end } = editor;
    editor.setRangeText("    ", start, end, "end");
  }
  editorEscaped = event.key === "Escape";
});
$("save").addEventListener("click", () => save());
$("reload").addEventListener("click", () => loadHandler({ replace: true }));
setInterval(() => { if (!document.hidden) loadHandler(); }, 3000);
loadHandler();

// ---- grading ----------------------------------------------------------------------------

function verdictTable(verdict) {
  const table = element("table", undefined, { class: "checks" });
  table.append(element("caption", verdict.passed ? "Every check passed." : "Some checks failed."));
  const head = element("tr");
  for (const title of ["Check", "Verdict", "What the grader saw"]) head.append(element("th", title, { scope: "col" }));
  table.append(head);
  for (const check of verdict.checks) {
    const row = element("tr");
    row.append(element("th", check.name, { scope: "row" }));
    row.append(element("td", check.passed ? "PASS" : "FAIL", { class: check.passed ? "pass" : "fail" }));
    const cell = element("td");
    cell.append(element("p", check.reason));
    if (!check.passed && check.hint) cell.append(element("p", `Hint: ${check.hint}`, { class: "hint" }));
    if (!check.passed && Array.isArray(check.story) && check.story.length) {
      // What happened to each delivery in the trial that failed, as the grader prints it.
      cell.append(element("p", "What happened in the trial that failed:"));
      cell.append(lines(check.story));
    }
    row.append(cell);
    table.append(row);
  }
  return table;
}

// The verdict shown belongs to the handler.py it judged: once the file changes (in the editor
// or in the terminal), it says so, with the time it was graded.
let graded = null; // {version, at} of the verdict on the page

function markOldGrade(current) {
  if (graded === null || graded.version === current || graded.old) return;
  graded.old = true;
  const note = element("p", `This result is for an earlier handler.py, graded at ${graded.at}; the file`
                            + " has changed since. Grade again for the current one.", { class: "problem", id: "grade-old" });
  $("grade-result").prepend(note);
  $("grade-result").classList.add("old");
}

$("grade").addEventListener("click", async () => {
  const button = $("grade");
  busy(button, true);
  graded = null;
  $("grade-result").classList.remove("old");
  show($("grade-result"), element("p", "Grading handler.py (a few seconds)…"));
  try {
    if (dirty()) await save();
    const verdict = await api("POST", "api/grade");
    if (verdict.error) {
      show($("grade-result"), element("p", `Cannot grade: ${verdict.error}`));
    } else {
      graded = { version: verdict.version, at: new Date().toLocaleTimeString(), old: false };
      show($("grade-result"), element("p", `Graded at ${graded.at}.`, { class: "hint", id: "graded-at" }),
           verdictTable(verdict));
      if (verdict.version !== loadedVersion) markOldGrade(loadedVersion);
    }
  } catch (error) {
    show($("grade-result"), element("p", error.message));
  } finally {
    busy(button, false);
  }
});

loadGuide();
