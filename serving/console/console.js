// The console of `durable-agent serve` (docs/console.md): the runs that wait for a person, and
// one run's page, over the HTTP API (docs/http-api.md) with the token taken once from the link's
// #token= fragment. No build step and no dependency: the file the package ships is what runs.
//
// Everything a model, a tool or a person wrote is put on the page as text (textContent, through
// `el`), never parsed as HTML: a run's prompt, its arguments and its answers are untrusted. The
// server's Content-Security-Policy allows this file's script only, which stops an injected one
// even if a later change forgot that. What a model wrote goes through `visible` too: a control
// or a bidi character in it would forge a line of a plan or reorder what a person reads.

const TOKEN_KEY = "durable-agent-token";
const LIST_REFRESH_MS = 3000;
const MAX_PROGRESS_LINES = 300;
const REFUSED_STREAM_RETRY_MS = 5000;
const DELEGATE = "delegate";

// ---------------------------------------------------------------------------------------------
// The token, the API and the page's notice line

function takeToken() {
  const found = /^#token=(.+)$/.exec(location.hash);
  if (found) {
    let token = found[1];
    try {
      token = decodeURIComponent(token);
    } catch {
      // Not percent-encoded as a link would be: taken as it stands.
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    // Out of the address bar and the history, where a screen share or a shared link shows it.
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

class ApiError extends Error {
  constructor(status, detail) {
    super(describe(detail));
    this.status = status;
  }
}

// The API's `detail`: a sentence, or FastAPI's list of {loc, msg} for a request it refused.
function describe(detail) {
  if (Array.isArray(detail)) {
    return detail.map((e) => `${(e.loc || []).slice(1).join(".")}: ${e.msg}`).join("; ");
  }
  return typeof detail === "string" ? detail : JSON.stringify(detail);
}

function authorization() {
  return { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY) || ""}` };
}

async function api(path, { method = "GET", body } = {}) {
  const headers = authorization();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (response.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    showTokenForm("The token was refused: paste the one serve printed.");
    throw new ApiError(401, data && data.detail);
  }
  if (!response.ok) throw new ApiError(response.status, data ? data.detail : response.statusText);
  return data;
}

function notify(text, isError = false) {
  const notice = document.getElementById("notice");
  notice.textContent = text;
  notice.className = isError ? "error" : "";
  notice.hidden = !text;
}

// ---------------------------------------------------------------------------------------------
// Elements, always from text

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "className") node.className = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// What Python's str.isprintable() refuses (controls, format characters such as the bidi
// overrides, separators but the space, surrogates, private and unassigned code points), which
// serving/command_line.py's `visible` shows as escapes at the CLI; newlines and tabs too unless
// `lines` (a message's or an answer's own lines).
const UNPRINTABLE = /(?! )[\p{C}\p{Z}]/gu;
const UNPRINTABLE_BUT_LINES = /(?![ \n\t])[\p{C}\p{Z}]/gu;
const SHORT_ESCAPES = { "\t": "\\t", "\n": "\\n", "\r": "\\r" };

// `text` as the CLI shows what a model wrote: each such character as Python's escape of it
// (`\x1b`, `\u202e`), so that a plan step with a newline shows as one step and a bidi override
// reorders nothing. Anything but a string is left as it is (`el` drops null).
function visible(text, { lines = false } = {}) {
  if (typeof text !== "string") return text;
  return text.replace(lines ? UNPRINTABLE_BUT_LINES : UNPRINTABLE, (c) => {
    const code = c.codePointAt(0);
    const [prefix, digits] = code < 0x100 ? ["x", 2] : code < 0x10000 ? ["u", 4] : ["U", 8];
    return SHORT_ESCAPES[c] || `\\${prefix}${code.toString(16).padStart(digits, "0")}`;
  });
}

function link(path, ...children) {
  return el("a", { href: path, "data-route": true }, ...children);
}

// What the server counts as a text's characters (Python's len: code points). A string's
// `length` counts UTF-16 units, two for an emoji: a cut field of emoji would seem whole.
function characters(text) {
  return [...text].length;
}

function money(usd) {
  return usd === null || usd === undefined ? "unknown" : `$${Number(usd).toFixed(4)}`;
}

function runPath(workflowId) {
  return `/runs/${encodeURIComponent(workflowId)}`;
}

function apiPath(workflowId, rest = "") {
  return `/api/runs/${encodeURIComponent(workflowId)}${rest}`;
}

// ---------------------------------------------------------------------------------------------
// Routing: `/` is the list, `/runs/{id}` a run; links move without reloading (the token stays)

let leave = () => {};

function route() {
  leave();
  leave = () => {};
  notify("");
  const app = document.getElementById("app");
  app.replaceChildren();
  if (!sessionStorage.getItem(TOKEN_KEY)) {
    showTokenForm("Open the console link that serve printed, or paste its token.");
    return;
  }
  const run = /^\/runs\/(.+)$/.exec(location.pathname);
  if (run) leave = showRun(app, decodeURIComponent(run[1]));
  else leave = showList(app);
}

document.addEventListener("click", (event) => {
  const anchor = event.target.closest && event.target.closest("a[data-route]");
  if (!anchor || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
  event.preventDefault();
  history.pushState(null, "", anchor.getAttribute("href"));
  route();
});
window.addEventListener("popstate", route);

function showTokenForm(why) {
  leave();
  leave = () => {};
  const input = el("input", { type: "password", autocomplete: "off", "aria-label": "token" });
  const form = el(
    "form",
    {
      onsubmit: (event) => {
        event.preventDefault();
        if (!input.value.trim()) return;
        sessionStorage.setItem(TOKEN_KEY, input.value.trim());
        route();
      },
    },
    el("p", {}, why),
    el("div", { className: "actions" }, input, el("button", { type: "submit" }, "Use token")),
  );
  document.getElementById("app").replaceChildren(form);
}

// `read` made to run one at a time: a call while it runs asks for one more run after it, and
// waits for that.
function oneAtATime(read) {
  let running = null;
  let again = false;
  return async function refresh() {
    if (running) {
      again = true;
      return running;
    }
    running = (async () => {
      do {
        again = false;
        await read();
      } while (again);
    })();
    try {
      await running;
    } finally {
      running = null;
    }
  };
}

// ---------------------------------------------------------------------------------------------
// The list: runs waiting for a person first, with why

function why(waiting) {
  if (waiting.error) return [visible(`its status could not be read: ${waiting.error}`)];
  const reasons = [];
  if (waiting.plan) {
    const steps = waiting.plan.steps.length;
    reasons.push(`plan v${waiting.plan.version} waits for approval (${steps} steps)`);
  }
  for (const call of waiting.calls) {
    const script = call.script ? ` (in the script of run_code call ${call.script})` : "";
    reasons.push(`tool call ${call.tool}${script} waits for approval: ${call.arguments}`);
  }
  return reasons.map((reason) => visible(reason));
}

function showList(app) {
  const waiting = el("section", { id: "waiting" });
  const others = el("section", { id: "others" });
  app.replaceChildren(
    el("h1", {}, "Runs"),
    el("h2", {}, "Waiting for a person"),
    waiting,
    el("h2", {}, "Other runs"),
    others,
  );
  document.getElementById("where").textContent = "";
  let stopped = false;
  let timer = null;

  const refresh = oneAtATime(readList);

  async function readList() {
    try {
      const runs = await api("/api/runs");
      const asking = runs.filter((run) => run.waiting);
      waiting.replaceChildren(
        ...(asking.length ? [] : [el("p", { className: "muted" }, "Nothing waits for a person.")]),
        ...asking.map((run) =>
          el(
            "div",
            { className: "card waiting" },
            link(runPath(run.workflow_id), visible(run.workflow_id)),
            ...why(run.waiting).map((line) => el("div", { className: "why text" }, line)),
          ),
        ),
      );
      const rest = runs.filter((run) => !run.waiting);
      others.replaceChildren(
        rest.length
          ? el(
              "table",
              {},
              el("tr", {}, el("th", {}, "Run"), el("th", {}, "Status")),
              ...rest.map((run) =>
                el(
                  "tr",
                  {},
                  el("td", {}, link(runPath(run.workflow_id), visible(run.workflow_id))),
                  el("td", { className: `status-${run.status}` }, run.status || "unknown"),
                ),
              ),
            )
          : el("p", { className: "muted" }, "No other runs."),
      );
    } catch (error) {
      if (error.status === 401) return;
      notify(`The list could not be read: ${error.message}`, true);
    }
    if (!stopped) timer = setTimeout(refresh, LIST_REFRESH_MS);
  }
  refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

// ---------------------------------------------------------------------------------------------
// One run: what waits, with its arguments; the transcript; cost and limits; progress as it goes

function showRun(app, workflowId) {
  // A sub-agent's run id ends in its parent's call id, which the model wrote.
  document.getElementById("where").textContent = `/ ${visible(workflowId)}`;
  const summary = el("section", { id: "summary" }, el("p", {}, "Loading…"));
  const deciding = el("section", { id: "deciding" });
  const talking = el("section", { id: "talking" });
  const writing = el("div", { id: "writing", className: "card text", hidden: true });
  const outcome = el("section", { id: "outcome" });
  const transcript = el("section", { id: "transcript" });
  const progress = el("div", { id: "progress", className: "card progress" });
  const cancel = el("button", { className: "cancel", onclick: () => act(cancelRun) }, "Cancel");
  app.replaceChildren(
    el("p", {}, link("/", "← Runs")),
    el("h1", {}, visible(workflowId)),
    summary,
    deciding,
    talking,
    outcome,
    el("h2", {}, "Transcript"),
    writing,
    transcript,
    el("h2", {}, "Progress"),
    progress,
    el("div", { className: "actions" }, cancel),
  );
  const stop = new AbortController();
  let messages = [];
  let ended = false;
  let pending = null;

  async function act(action) {
    for (const button of app.querySelectorAll("button")) button.disabled = true;
    try {
      await action();
      notify("");
    } catch (error) {
      notify(error.message, true);
    } finally {
      for (const button of app.querySelectorAll("button")) button.disabled = false;
      await refresh();
    }
  }

  async function decide(decision) {
    await api(apiPath(workflowId, "/decisions"), { method: "POST", body: decision });
  }

  // Two clicks: the first asks (no browser dialog, which a tab in the background hides).
  async function cancelRun() {
    if (cancel.dataset.asked !== "yes") {
      cancel.dataset.asked = "yes";
      cancel.textContent = "Cancel the run: it stops and undoes what it changed. Click to confirm";
      return;
    }
    await api(apiPath(workflowId, "/cancel"), { method: "POST" });
    cancel.textContent = "Cancelling…";
  }

  function showSummary(status) {
    const usage = status.usage;
    const limits = status.limits;
    const costLimit = limits.max_cost_usd === null ? "" : ` of ${money(limits.max_cost_usd)}`;
    summary.replaceChildren(
      el(
        "p",
        {},
        el("strong", { className: `status-${status.status}` }, status.status),
        status.details ? ` — ${visible(status.details)}` : "",
      ),
      el(
        "p",
        { className: "muted" },
        `step ${status.step} of ${limits.max_steps} · cost ${money(usage.cost_usd)}${costLimit}`,
        ` · ${usage.input_tokens} input, ${usage.output_tokens} output tokens`,
        limits.max_total_tokens === null ? "" : ` of ${limits.max_total_tokens}`,
      ),
      ...status.tool_notices.map((notice) => el("p", { className: "why" }, visible(notice))),
      ...status.guardrail_lines.map((line) => el("p", { className: "why guardrail" }, visible(line))),
    );
    cancel.hidden = ended;
  }

  function showDecisions(status) {
    // Laid out anew only when what waits changed: a reason being typed stays.
    const plan = status.plan;
    const waitingCalls = [...status.approvals, ...status.sub_agent_approvals].filter(
      (call) => call.status === "awaiting_approval",
    );
    const callbacks = (status.pending_callbacks || []).map((c) => c.call_id);
    const shownNow = JSON.stringify([
      plan && [plan.version, plan.status],
      waitingCalls.map((c) => [c.call_id, Boolean(c.judging), Boolean(c.verdict)]),
      callbacks,
    ]);
    if (deciding.dataset.shown === shownNow) return;
    deciding.dataset.shown = shownNow;
    const cards = [];
    if (plan && plan.status === "awaiting_approval") {
      const reason = el("input", { type: "text", placeholder: "reason (needed to reject)" });
      cards.push(
        el(
          "div",
          { className: "card waiting", id: "plan" },
          el("h2", {}, `Plan v${plan.version} waits for approval`),
          el("ol", {}, ...plan.steps.map((step) => el("li", { className: "text" }, visible(step)))),
          el(
            "div",
            { className: "actions" },
            el(
              "button",
              {
                className: "approve",
                onclick: () =>
                  act(() =>
                    decide({ kind: "plan", approve: true, version: plan.version, reason: reason.value || null }),
                  ),
              },
              "Approve",
            ),
            reason,
            el(
              "button",
              {
                className: "reject",
                onclick: () =>
                  act(async () => {
                    if (!reason.value.trim()) throw new Error("Say why you reject the plan: the model reads it.");
                    await decide({ kind: "plan", approve: false, version: plan.version, reason: reason.value });
                  }),
              },
              "Reject",
            ),
          ),
        ),
      );
    }
    for (const call of waitingCalls) {
      const reason = el("input", { type: "text", placeholder: "reason (optional)" });
      const remember = el("input", { type: "checkbox" });
      const shown = call.fields && call.fields.length
        ? el(
            "dl",
            { className: "fields" },
            ...call.fields.flatMap((field) => [
              el("dt", {}, visible(field.name)),
              el(
                "dd",
                { className: "code" },
                visible(field.value),
                field.chars > characters(field.value) ? ` … (${field.chars} characters in all)` : "",
              ),
            ]),
          )
        : el("pre", { className: "code" }, visible(call.arguments));
      const decideCall = (approve) =>
        act(() =>
          decide({
            kind: "tool_call",
            call_id: call.call_id,
            approve,
            reason: reason.value || null,
            remember: remember.checked,
          }),
        );
      cards.push(
        el(
          "div",
          { className: "card waiting call", "data-call-id": call.call_id },
          el(
            "h2",
            {},
            call.judging
              ? `Tool call ${visible(call.tool)}: auto mode's judge is reviewing it`
              : `Tool call ${visible(call.tool)} waits for approval`,
          ),
          el("p", { className: "muted" }, `call ${visible(call.call_id)}, step ${call.step}`),
          // A call a code-mode script made: the script waits on the decision.
          call.script
            ? el("p", { className: "why script" }, `in the script of run_code call ${visible(call.script)}, which waits for it`)
            : null,
          call.judging ? el("p", { className: "why" }, "You may decide it before the judge does: you win.") : null,
          // The line the CLI and the Web UI show, sent whole (serving/http_api.py's ShownStatus).
          call.verdict ? el("p", { className: "why judge" }, visible(status.verdict_lines[call.call_id])) : null,
          call.fields_left_out ? el("p", { className: "why" }, `${call.fields_left_out} more fields not shown`) : null,
          shown,
          el(
            "div",
            { className: "actions" },
            el("button", { className: "approve", onclick: () => decideCall(true) }, "Approve"),
            reason,
            el("button", { className: "reject", onclick: () => decideCall(false) }, "Reject"),
            el("label", {}, remember, " decide its later calls too"),
          ),
        ),
      );
    }
    for (const pending of status.pending_callbacks || []) {
      cards.push(
        el(
          "div",
          { className: "card callback", "data-call-id": pending.call_id },
          el("h2", {}, `Tool call ${visible(pending.tool)} waits for its client`),
          el(
            "p",
            { className: "muted" },
            `call ${visible(pending.call_id)}, step ${pending.step}; its app answers it, or it times out after ${pending.timeout_seconds} s`,
          ),
          // Its JSON's lines kept: JSON.stringify escapes a value's newline, not a bidi override.
          el("pre", { className: "code" }, visible(JSON.stringify(pending.arguments, null, 2), { lines: true })),
        ),
      );
    }
    deciding.replaceChildren(...cards);
  }

  function showConversation(status) {
    const conversation = status.conversation;
    if (!conversation || ended || conversation.ended) {
      talking.replaceChildren(
        conversation && conversation.ended ? el("p", { className: "muted" }, `Ended: ${conversation.ended}`) : "",
      );
      return;
    }
    if (talking.querySelector("textarea")) {
      talking.querySelector(".muted").textContent = conversationLine(conversation);
      talking.querySelector("button.interrupt").hidden = !conversation.working;
      return;
    }
    const text = el("textarea", { "aria-label": "message", placeholder: "Write to the agent" });
    talking.replaceChildren(
      el("h2", {}, "Conversation"),
      el("p", { className: "muted" }, conversationLine(conversation)),
      text,
      el(
        "div",
        { className: "actions" },
        el(
          "button",
          {
            onclick: () =>
              act(async () => {
                if (!text.value.trim()) return;
                await api(apiPath(workflowId, "/messages"), { method: "POST", body: { text: text.value } });
                text.value = "";
              }),
          },
          "Send",
        ),
        el(
          "button",
          {
            className: "interrupt",
            hidden: !conversation.working,
            onclick: () => act(() => api(apiPath(workflowId, "/interrupt"), { method: "POST" })),
          },
          "Interrupt",
        ),
      ),
    );
  }

  function conversationLine(conversation) {
    const queued = conversation.queued.length ? `, ${conversation.queued.length} queued` : "";
    return `turn ${conversation.turn}${conversation.working ? ", working" : ", waiting for a message"}${queued}`;
  }

  function showMessage(message) {
    const role = message.role === "tool" ? `tool ${visible(message.tool_name)}` : message.role;
    const parts = [el("div", { className: "role" }, role)];
    const content = visible(message.content, { lines: true });
    if (content) parts.push(el("div", { className: "text" }, content));
    for (const call of message.tool_calls || []) {
      parts.push(el("div", { className: "code" }, visible(`→ ${call.name}(${call.arguments})`)));
    }
    const kind = message.is_error ? "error" : message.role;
    return el("div", { className: `message ${kind}` }, ...parts);
  }

  async function readTranscript() {
    let page = await api(apiPath(workflowId, `/transcript?start=${messages.length}`));
    if (page.total < messages.length) {
      // Compacted: the run replaced its older messages with a summary; read it anew.
      messages = [];
      page = await api(apiPath(workflowId, "/transcript?start=0"));
    }
    while (page.messages.length) {
      messages.push(...page.messages);
      transcript.append(...page.messages.map(showMessage));
      if (messages.length >= page.total) break;
      page = await api(apiPath(workflowId, `/transcript?start=${messages.length}`));
    }
    if (!messages.length) transcript.replaceChildren();
  }

  // Two reads at once would both append the transcript's new messages.
  const refresh = oneAtATime(readRun);

  async function readRun() {
    try {
      const status = await api(apiPath(workflowId));
      ended = ["completed", "failed"].includes(status.status) || ended;
      showSummary(status);
      showDecisions(status);
      showConversation(status);
      await readTranscript();
    } catch (error) {
      if (error.status === 404) notify(`There is no run ${workflowId}.`, true);
      else if (error.status !== 401) notify(`The run could not be read: ${error.message}`, true);
    }
  }

  // Many events come together (a step's model call, its tools): one read after them.
  function refreshSoon() {
    if (pending !== null) return;
    pending = setTimeout(async () => {
      pending = null;
      await refresh();
    }, 150);
  }

  function onEvent(name, data) {
    if (name === "delta") {
      if (data.kind === "void") writing.textContent = "";
      else if (data.kind === "text") writing.textContent += visible(data.text, { lines: true });
      writing.hidden = !writing.textContent;
      return;
    }
    if (name === "done") {
      ended = true;
      writing.textContent = "";
      writing.hidden = true;
      outcome.replaceChildren(showOutcome(data));
      refreshSoon();
      return;
    }
    if (name === "step_finished" || name === "turn_finished") {
      writing.textContent = "";
      writing.hidden = true;
    }
    // A call a code-mode script made names the run_code call whose script made it.
    const script = data.script ? `(script ${data.script}, call ${data.call_id})` : null;
    const line = [`#${data.step}`, name, data.tool, script, data.outcome, data.text]
      .filter((part) => part !== null && part !== undefined && part !== "")
      .join(" ");
    // A sub-agent is a run of its own, `<this run>/<the delegate call>`: its events are its own.
    const subAgent = data.tool === DELEGATE && name === "tool_call_started" && data.call_id
      ? [" ", link(runPath(`${workflowId}/${data.call_id}`), "its sub-agent's run")]
      : [];
    progress.append(el("div", {}, visible(line), ...subAgent));
    while (progress.childElementCount > MAX_PROGRESS_LINES) progress.firstElementChild.remove();
    progress.scrollTop = progress.scrollHeight;
    refreshSoon();
  }

  // A stream past a bound of the server's is refused (429): the page says so until it follows.
  let refusedShown = false;
  function onRefused(why) {
    if (why) notify(why, true);
    else if (refusedShown) notify("");
    refusedShown = Boolean(why);
    // No events tell the page that the run moved: it reads the run at each ask instead.
    if (why && !ended) refreshSoon();
  }

  refresh();
  follow(workflowId, stop.signal, onEvent, onRefused);
  return () => {
    stop.abort();
    clearTimeout(pending);
  };
}

function showOutcome(outcome) {
  if (outcome.status === "completed") {
    const result = outcome.result;
    const answer = result.output === null || result.output === undefined ? result.answer : JSON.stringify(result.output, null, 2);
    return el(
      "div",
      { className: "card", id: "answer" },
      el("h2", { className: "status-completed" }, "Answer"),
      el("div", { className: "text" }, visible(answer, { lines: true })),
    );
  }
  const error = outcome.error || {};
  return el(
    "div",
    { className: "card", id: "answer" },
    el("h2", { className: "status-failed" }, `Failed: ${visible(error.type || outcome.status)}`),
    el("div", { className: "text" }, visible(error.message || "", { lines: true })),
  );
}

// The run's Server-Sent Events, read with fetch (EventSource cannot send the token), resumed
// from the last event's id after a dropped connection, until `done`. A stream the server
// refuses for its bounds (429) is asked for again a while later; `onRefused` gets why, then
// null once it follows.
async function follow(workflowId, signal, onEvent, onRefused) {
  let last = null;
  while (!signal.aborted) {
    let pause = 1000;
    try {
      const headers = authorization();
      if (last !== null) headers["Last-Event-ID"] = String(last);
      const response = await fetch(apiPath(workflowId, "/events"), { headers, signal });
      if (response.status === 429) {
        const data = await response.json();
        pause = REFUSED_STREAM_RETRY_MS;
        onRefused(
          `Its events are not shown as they come: ${describe(data.detail)}. Asked again every ${pause / 1000} s.`,
        );
      } else if (!response.ok) {
        return;
      } else {
        onRefused(null);
        const ended = await readEvents(response, onEvent, (id) => {
          last = id;
        });
        if (ended) return;
      }
    } catch (error) {
      if (signal.aborted) return;
    }
    await new Promise((resolve) => setTimeout(resolve, pause));
  }
}

// One response's events, each to `onEvent` (and its id to `onId`); true when it ended with `done`.
async function readEvents(response, onEvent, onId) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const fields = {};
      for (const line of buffer.slice(0, end).split("\n")) {
        const colon = line.indexOf(": ");
        if (colon > 0) fields[line.slice(0, colon)] = line.slice(colon + 2);
      }
      buffer = buffer.slice(end + 2);
      if (fields.id !== undefined) onId(Number(fields.id));
      onEvent(fields.event, JSON.parse(fields.data));
      if (fields.event === "done") return true;
    }
  }
}

takeToken();
route();
