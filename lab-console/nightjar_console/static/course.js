// A course's lab (under the hub): what the course's staff sent, and when they viewed this lab's
// work (nightjar_console/course_events.py keeps both; api/course serves them). Looked at every
// 2 seconds; each message stays until its Dismiss; every text goes in as text, never as HTML.
const body = document.body;
const base = body.dataset.base || "/";
const lang = () => (document.documentElement.lang === "ja" || body.dataset.lang === "ja") ? "ja" : "en";
const section = document.getElementById("course-news");
const WORDS = {
  en: { viewed: "Viewed by {by} at {at}", dismiss: "Dismiss", from: "Message from {by}" },
  ja: { viewed: "{by} が {at} に閲覧しました", dismiss: "閉じる", from: "{by} からのメッセージ" },
};
const say = (key, fields) => WORDS[lang()][key].replace(/\{(\w+)\}/g, (_, name) => fields[name]);
const clock = iso => new Date(Date.parse(iso)).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (cls) node.className = cls;
  return node;
}

async function dismiss(id) {
  await fetch(base + "api/course/dismiss", { method: "POST", headers: {
    "Content-Type": "application/json", "X-XSRFToken": body.dataset.xsrf }, body: JSON.stringify({ id }) });
  look();
}

function draw(found) {
  const items = [];
  for (const message of found.messages) {
    const box = el("div", undefined, "course-message");
    box.setAttribute("role", "status");
    box.dataset.id = message.id;
    box.append(el("strong", say("from", { by: message.by }) + ": "),
               el("span", message.text[lang()] || message.text.en || Object.values(message.text)[0]));
    const button = el("button", say("dismiss"));
    button.type = "button";
    button.addEventListener("click", () => dismiss(message.id));
    box.append(" ", button);
    items.push(box);
  }
  const last = found.views[found.views.length - 1];
  if (last) items.push(el("p", say("viewed", { by: last.by, at: clock(last.at) }), "course-viewed"));
  // Drawn anew only when it changed: the page does not move under the learner's hands.
  const drawn = JSON.stringify(found);
  if (drawn === section.dataset.drawn) return;
  section.dataset.drawn = drawn;
  section.replaceChildren(...items);
}

async function look() {
  try {
    const answer = await fetch(base + "api/course", { headers: { "X-XSRFToken": body.dataset.xsrf } });
    if (answer.ok) draw(await answer.json());
  } catch (error) { /* the lab is restarting: the next look finds it */ }
}

if (section) {
  look();
  setInterval(look, 2000);
}
