"use strict";
// "Start a notebook": the form takes `corral notebook`'s options and goes through the routes the command line
// uses, with the user's own credential: the controller builds the session's spec from them (POST
// /notebooks/spec, which creates nothing), the spec is applied as any service (POST /services), and the link's
// credential is an API token (POST /tokens) that expires an hour after the time limit. Once JupyterLab answers,
// the page shows the link through the gateway. The page also lists the notebooks (sessions) with Open and Stop:
// the gateway and the API decide who may (only the owner opens one; stopping is as for any service).
// The links go through the gateway the controller names ([gateway] url, in /health); only where it names none
// does the form ask for the gateway's URL (kept in this browser).

(() => {
  const {api, h, section, table, badge} = Corral;
  const GATEWAY_KEY = "corral.gateway";
  const POLL_S = 1;
  const LOG_LINES = 5;

  // The notebook being started from this page, kept across the page's re-renderings:
  // {name, labPath, token, tokenId, gateway, state: "starting"|"ready"|"failed", job, node, error}.
  let started = null;
  let formError = null;
  let typed = {};  // what the form held when it was sent: the page is rendered anew while a notebook starts
  let knownGateway = null;  // the controller's [gateway] url, read as the page renders

  function field(label, input, hint) {
    return h("label", {class: "field"}, h("span", {}, label), input, hint ? h("small", {class: "muted"}, hint) : null);
  }

  function notebookForm() {
    const input = (name, attrs) => h("input", {name, id: `nb-${name}`, ...attrs,
      ...(name in typed ? {value: typed[name]} : {})});
    const form = h("form", {class: "notebook-form", id: "notebook-form", onsubmit: (event) => {
      event.preventDefault();
      start(form);
    }},
    h("div", {class: "fields"},
      field("GPUs", input("gpus", {type: "number", min: 0, max: 64, value: 1, required: true})),
      field("or a share of one GPU", input("gres", {placeholder: "shard:2 or mps:25", size: 14}),
        "instead of whole GPUs: set GPUs to 0"),
      field("Time limit", input("time", {value: "4:00:00", required: true, size: 10}), "4:00:00, 1-00:00:00"),
      field("Idle timeout", input("idle_timeout", {value: "30:00", size: 10}),
        "stopped once its kernels and GPUs are idle this long; empty: never"),
      field("QOS", input("qos", {placeholder: "default", size: 12})),
      field("Partition", input("partition", {placeholder: "default", size: 12})),
      field("Name", input("name", {placeholder: "nb-you-XXXX", size: 18})),
      field("Jupyter", input("jupyter", {value: "jupyter", required: true, size: 30}),
        "the command on the node, or its absolute path (your environment's JupyterLab)"),
      field("Directory", input("workdir", {required: true, placeholder: "/home/you/project", size: 30}),
        "where it starts on the node; its log goes there"),
      knownGateway ? null : field("Gateway", input("gateway", {type: "url", required: true, size: 30,
        value: localStorage.getItem(GATEWAY_KEY) || "", placeholder: "http://gateway.example:6820"}),
      "the cluster names no gateway: the services gateway as your browser reaches it")),
    knownGateway ? h("p", {class: "small muted", id: "nb-gateway-known"}, "Its link goes through the gateway at ",
      h("code", {}, knownGateway), ".") : null,
    h("button", {type: "submit", id: "notebook-start", disabled: started && started.state === "starting"},
      "Start notebook"),
    formError ? h("p", {class: "error", role: "alert", id: "notebook-error"}, formError) : null);
    return form;
  }

  function options(form) {
    const value = (name) => form.elements[name].value.trim();
    const body = {gpus: Number(value("gpus")), time: value("time"), jupyter: value("jupyter"), workdir: value("workdir")};
    for (const name of ["gres", "idle_timeout", "qos", "partition", "name"]) {
      if (value(name)) body[name] = value(name);
    }
    return body;
  }

  function refused(step, err) {
    const status = err instanceof Corral.ApiError ? ` (${err.status})` : "";
    const reason = err instanceof Corral.ApiError ? err.detail : err.message;
    return `${step} refused${status}: ${reason}.`;
  }

  function typedGateway(form) {
    const gateway = form.elements.gateway.value.trim().replace(/\/+$/, "");
    localStorage.setItem(GATEWAY_KEY, gateway);
    return gateway;
  }

  async function start(form) {
    const gateway = knownGateway || typedGateway(form);
    typed = Object.fromEntries([...form.elements].filter((el) => el.name).map((el) => [el.name, el.value]));
    formError = null;
    let plan;
    try {
      plan = await api("/notebooks/spec", {method: "POST", body: options(form)});
    } catch (err) {
      return fail(null, refused("Start the notebook", err) + " Nothing was started.");
    }
    try {
      await api("/services", {method: "POST", body: plan.spec});
    } catch (err) {
      return fail(null, refused(`Start notebook ${plan.name}`, err) + " Nothing was started.");
    }
    let token;
    try {
      token = await api("/tokens", {method: "POST", body: plan.token});
    } catch (err) {
      await undo(plan.name, null);
      return fail(null, refused(`The link's credential for ${plan.name}`, err) + " The notebook was stopped.");
    }
    started = {name: plan.name, labPath: plan.lab_path, token: token.token, tokenId: token.id, gateway,
      state: "starting", job: null, node: null, error: null};
    await Corral.route(true);
    watch(started);
  }

  async function fail(session, message) {
    if (session) { session.state = "failed"; session.error = message; } else formError = message;
    await Corral.route(true);
  }

  async function undo(name, tokenId) {
    await api(`/services/${encodeURIComponent(name)}`, {method: "DELETE", allowErrors: true}).catch(() => {});
    if (tokenId !== null) await api(`/tokens/${tokenId}`, {method: "DELETE", allowErrors: true}).catch(() => {});
  }

  // Until JupyterLab answers (its replica ready), or the session ends first: then its log's last lines say why.
  async function watch(session) {
    while (started === session && session.state === "starting") {
      const reply = await api(`/services/${encodeURIComponent(session.name)}`, {allowErrors: true}).catch((err) => ({error: err.message}));
      if (reply.status === 404) {
        await undo(session.name, session.tokenId);
        return fail(session, `Notebook ${session.name} ended before it was ready${await lastLines(session.job)}. ` +
          "Its link's credential was revoked.");
      }
      const replica = reply.replicas ? reply.replicas[0] : null;
      if (replica) {
        session.job = replica.job_id;
        session.node = replica.node;
        if (replica.ready) session.state = "ready";
      }
      if (location.hash.startsWith("#/notebook")) await Corral.route(true);
      if (session.state !== "starting") return;
      await new Promise((resolve) => setTimeout(resolve, POLL_S * 1000));
    }
  }

  async function lastLines(jobId) {
    if (!jobId) return "";
    const job = await api(`/jobs/${jobId}`, {allowErrors: true}).catch(() => null);
    const output = await api(`/jobs/${jobId}/output?tail_bytes=4096`, {allowErrors: true}).catch(() => null);
    const lines = output && output.text ? output.text.split("\n").filter((line) => line.trim()) : [];
    const said = lines.reverse().find((line) => line.startsWith("corral notebook:"));
    const state = job && job.state ? ` (job ${jobId} ${job.state})` : ` (job ${jobId})`;
    const detail = said || lines.slice(0, LOG_LINES).reverse().join("; ");
    return detail ? `${state}: ${detail}` : state;
  }

  function link(session) {
    return `${session.gateway}${session.labPath}?corral_token=${encodeURIComponent(session.token)}`;
  }

  function startedSection() {
    if (!started) return null;
    const s = started;
    let body;
    if (s.state === "ready") {
      body = [h("p", {id: "notebook-status"}, `Notebook ${s.name} is ready: job ${s.job} on ${s.node}.`),
        h("p", {}, h("a", {id: "notebook-link", href: link(s), target: "_blank", rel: "noopener"}, `Open ${s.name}`)),
        h("p", {class: "small"}, "The link carries a credential of yours: do not share it. It stops at its time " +
          "limit or when idle, and gives its GPUs back.")];
    } else if (s.state === "failed") {
      body = h("p", {class: "error", role: "alert", id: "notebook-error"}, s.error);
    } else {
      body = h("p", {id: "notebook-status"}, `Starting notebook ${s.name}` +
        (s.job ? `: job ${s.job}${s.node ? ` on ${s.node}` : " waits for its GPUs"}` : "") + "…");
    }
    return section(`Notebook ${s.name}`, body);
  }

  // Open: a fresh link credential of the caller's (the gateway lets the owner alone in); Stop: DELETE the
  // session's service, as `corral service delete` (the API decides who may).
  async function openSession(name, slot) {
    const field_ = document.getElementById("nb-gateway");
    const gateway = knownGateway ||
      ((field_ && field_.value.trim()) || localStorage.getItem(GATEWAY_KEY) || "").replace(/\/+$/, "");
    if (!gateway) {
      slot.replaceChildren(h("p", {class: "error", role: "alert"}, "Give the gateway's URL in the form above first."));
      return;
    }
    if (!knownGateway) localStorage.setItem(GATEWAY_KEY, gateway);
    try {
      const token = await api("/tokens", {method: "POST", body: {expires_s: 3600, description: `notebook ${name}`}});
      window.open(`${gateway}/s/${encodeURIComponent(name)}/lab?corral_token=${encodeURIComponent(token.token)}`, "_blank", "noopener");
    } catch (err) {
      slot.replaceChildren(h("p", {class: "error", role: "alert"}, refused(`Open ${name}`, err)));
    }
  }

  async function stopSession(name, slot, button) {
    if (!window.confirm(`Stop notebook ${name}? Its kernels are stopped; unsaved work is lost.`)) return;
    button.disabled = true;
    try {
      await api(`/services/${encodeURIComponent(name)}`, {method: "DELETE"});
      if (started && started.name === name) started = null;
      await Corral.route(true);
    } catch (err) {
      button.disabled = false;
      slot.replaceChildren(h("p", {class: "error", role: "alert", id: "session-error"},
        refused(`Stop notebook ${name}`, err) + " Nothing was changed."));
    }
  }

  function sessionRow(s) {
    const slot = h("div", {class: "action-slot"});
    const replica = s.replicas[0];
    const stop = h("button", {type: "button", class: "danger", "data-action": "stop",
      onclick: () => stopSession(s.name, slot, stop)}, "Stop");
    const open = h("button", {type: "button", "data-action": "open", onclick: () => openSession(s.name, slot)}, "Open");
    return h("tr", {"data-session": s.name},
      h("td", {}, s.name), h("td", {}, s.user), h("td", {}, replica ? h("a", {href: `#/job/${replica.job_id}`}, replica.job_id) : "—"),
      h("td", {}, replica ? badge(replica.ready ? "ready" : replica.state) : "—"),
      h("td", {class: "num"}, s.spec.gpu_share || s.spec.gpus_per_node),
      h("td", {}, s.spec.idle_timeout_s ? Corral.duration(s.spec.idle_timeout_s) : "—"),
      h("td", {}, h("div", {class: "actions"}, open, stop, slot)));
  }

  Corral.pages.notebook = async () => {
    knownGateway = await Corral.gatewayUrl();
    const sessions = (await api("/services")).filter((s) => s.spec.session);
    return h("div", {},
      section("Start a notebook", notebookForm()),
      startedSection(),
      section("Notebooks", table(["Name", "User", "Job", "State", "GPUs", "Idle timeout", ""],
        sessions.map(sessionRow), "no notebooks running")));
  };
})();
