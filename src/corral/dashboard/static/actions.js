"use strict";
// What a user does from the dashboard: cancel, hold, release and requeue a job, drain and resume a node
// (operators), and follow a running job's output. Each action is the API call the command line makes (the
// same route, so the same roles): the page offers the buttons that make sense in the job's or node's state,
// and the API decides. A refusal is shown with the API's reason, and nothing changes.

(() => {
  const {api, h, jobId} = Corral;
  const FOLLOW_S = 2;  // how often a running job's output is polled
  const FOLLOW_TAIL_BYTES = 16384;  // the most one poll brings; more than that in FOLLOW_S is skipped, said so
  const FOLLOW_KEEP_CHARS = 65536;  // the page keeps this much of the output, the newest

  // Which buttons a job gets, by its state; `confirm`: the question asked before a destructive action.
  const JOB_ACTIONS = [
    {route: "cancel", label: "Cancel", past: "Cancelled", when: (j) => j.state === "PENDING" || j.state === "RUNNING",
      confirm: (j) => `Cancel job ${jobId(j)} (${j.name})? ${j.state === "RUNNING" ? "Its processes are killed." : "It leaves the queue."}`},
    {route: "hold", label: "Hold", past: "Held", when: (j) => j.state === "PENDING" && !j.held},
    {route: "release", label: "Release", past: "Released", when: (j) => j.state === "PENDING" && j.held},
    {route: "requeue", label: "Requeue", past: "Requeued", when: (j) => j.state === "RUNNING" && j.requeue && !j.allocation,
      confirm: (j) => `Requeue job ${jobId(j)} (${j.name})? Its processes are killed and it waits in the queue again.`},
  ];

  // What the last action said, shown once by the next rendering of its page (the page is rendered anew).
  let said = null;

  function message(scope) {
    if (!said || said.scope !== scope) return null;
    const text = said.text;
    said = null;
    return h("p", {class: "action-done", role: "status", id: "action-message"}, text);
  }

  function refusal(slot, label, err) {
    const status = err instanceof Corral.ApiError ? ` (${err.status})` : "";
    const reason = err instanceof Corral.ApiError ? err.detail : err.message;
    slot.replaceChildren(h("p", {class: "error", role: "alert", id: "action-error"},
      `${label} refused${status}: ${reason}. Nothing was changed.`));
  }

  // Run one action: asks first where it is destructive, shows a refusal in `slot`, re-renders on success.
  async function act(buttons, slot, {label, path, body, confirm, done, scope}) {
    if (confirm && !window.confirm(confirm)) return;
    for (const button of buttons) button.disabled = true;
    slot.replaceChildren();
    try {
      const reply = await api(path, {method: "POST", body});
      said = {scope, text: done(reply)};
      await Corral.route(true);
    } catch (err) {
      if (err instanceof Corral.ApiError && err.status === 401) return;  // on the login page already
      refusal(slot, label, err);
      for (const button of buttons) button.disabled = false;
    }
  }

  // The job page's buttons (none for a job that has ended), and where the outcome is said.
  function jobControls(job) {
    const offered = JOB_ACTIONS.filter((action) => action.when(job));
    const slot = h("div", {class: "action-slot"}, message(`job ${job.id}`));
    if (!offered.length) return slot.childNodes.length ? h("div", {class: "actions"}, slot) : null;
    const buttons = offered.map((action) => h("button", {type: "button", "data-action": action.route,
      class: action.confirm ? "danger" : null,
      onclick: () => act(buttons, slot, {label: `${action.label} job ${jobId(job)}`,
        path: `/jobs/${job.id}/${action.route}`, confirm: action.confirm ? action.confirm(job) : null,
        scope: `job ${job.id}`, done: (reply) => `${action.past} job ${jobId(job)}: it is ${reply.state}` +
          (reply.held ? " (held)" : "") + "."})}, action.label));
    return h("div", {class: "actions", id: "job-actions"}, buttons, slot);
  }

  function canOperate() {
    return Boolean(Corral.me && (Corral.me.roles.includes("operator") || Corral.me.roles.includes("admin")));
  }

  // A node's drain (with the reason Slurm asks for) or resume, for operators: the nodes page's last column.
  function nodeControls(node) {
    const slot = h("div", {class: "action-slot"}, message(`node ${node.name}`));
    const drained = node.state === "drained" || node.state === "draining";
    if (drained) {
      const button = h("button", {type: "button", "data-action": "resume",
        onclick: () => act([button], slot, {label: `Resume ${node.name}`, path: `/nodes/${node.name}`,
          body: {drain: false}, scope: `node ${node.name}`, done: (reply) => `Resumed ${node.name}: it is ${reply.state}.`})},
      "Resume");
      return h("div", {class: "node-actions"}, button, slot);
    }
    const reason = h("input", {name: "reason", placeholder: "reason", required: true, pattern: ".*\\S.*", size: 14,
      maxlength: 256, title: "Why the node is drained (Slurm asks for a reason); shown on the nodes page"});
    const button = h("button", {type: "submit", "data-action": "drain", class: "danger"}, "Drain");
    const form = h("form", {class: "node-actions", onsubmit: (event) => {
      event.preventDefault();
      act([button], slot, {label: `Drain ${node.name}`, path: `/nodes/${node.name}`,
        body: {drain: true, reason: reason.value.trim()}, scope: `node ${node.name}`,
        confirm: `Drain ${node.name}? No new job starts there; its running jobs go on.`,
        done: (reply) => `Drained ${node.name}: it is ${reply.state} (${reply.drain_reason}).`});
    }}, reason, button, slot);
    return form;
  }

  // Follow a running job's output: poll what came after the last read and append it to `pre`, keeping the
  // newest FOLLOW_KEEP_CHARS. Stops when the page is rendered anew (`pre` left the document).
  function followOutput(job, output, pre) {
    if (output.error || !(job.state === "RUNNING" || job.state === "COMPLETING")) return null;
    const status = h("p", {class: "muted", id: "output-live"}, `Following live: new output every ${FOLLOW_S} s.`);
    let end = output.end;
    let empty = !output.text;
    const poll = async () => {
      if (!pre.isConnected) return;
      let reply;
      try {
        reply = await api(`/jobs/${job.id}/output?from_byte=${end}&tail_bytes=${FOLLOW_TAIL_BYTES}`, {allowErrors: true});
      } catch (err) {
        status.textContent = `Not following any more: ${err.message}`;
        return;
      }
      if (!pre.isConnected) return;
      if (reply.error) {
        status.textContent = `Not following any more: ${reply.error}`;
        return;
      }
      if (reply.start < end || empty) {  // the file was rewritten (or nothing was shown yet): start again
        pre.textContent = "";
        empty = false;
      } else if (reply.start > end) {
        pre.append(`\n[… ${reply.start - end} bytes not shown …]\n`);
      }
      if (reply.text) {
        const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.append(reply.text);
        if (pre.textContent.length > FOLLOW_KEEP_CHARS) pre.textContent = pre.textContent.slice(-FOLLOW_KEEP_CHARS);
        if (atBottom) pre.scrollTop = pre.scrollHeight;
      } else if (!pre.textContent) {
        pre.textContent = "(empty)";
        empty = true;
      }
      end = reply.end;
      status.textContent = `Following live: new output every ${FOLLOW_S} s; the file has ${reply.size} bytes.`;
      setTimeout(poll, FOLLOW_S * 1000);
    };
    setTimeout(poll, FOLLOW_S * 1000);
    return status;
  }

  Corral.actions = {jobControls, nodeControls, canOperate, followOutput};
})();
