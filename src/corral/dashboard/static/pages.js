"use strict";
// The dashboard's pages: each reads the REST API as the signed-in user and returns its content. What a
// user sees is what the API shows that user: the dashboard adds no rule of its own.

(() => {
  const {api, h, table, section, badge, when, duration, ago, mib, jobId} = Corral;
  const charts = window.CorralCharts;
  const STATES = ["PENDING", "RUNNING", "COMPLETING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
    "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"];
  const JOB_LIMIT = 500;

  function stat(label, value, note) {
    return h("div", {class: "stat"}, h("div", {class: "stat-value"}, value), h("div", {class: "stat-label"}, label),
      note ? h("div", {class: "stat-note"}, note) : null);
  }

  function jobLink(job) { return h("a", {href: `#/job/${jobId(job)}`}, jobId(job)); }

  // ----- login

  Corral.pages.login = () => {
    const message = sessionStorage.getItem("corral.loginMessage") || "Paste an API token to sign in.";
    const input = h("input", {type: "password", id: "token", name: "token", autocomplete: "off",
      placeholder: "ct1.…", required: true, size: 60});
    const status = h("p", {id: "login-message", class: message.startsWith("Your token") ? "error" : "muted"}, message);
    const form = h("form", {class: "card login", onsubmit: async (event) => {
      event.preventDefault();
      sessionStorage.setItem(Corral.TOKEN_KEY, input.value.trim());
      sessionStorage.removeItem("corral.loginMessage");
      Corral.me = null;
      try {
        await Corral.showIdentity();
        location.hash = "#/overview";
      } catch (err) {
        sessionStorage.removeItem(Corral.TOKEN_KEY);  // kept only once the API took it
        if (!(err instanceof Corral.ApiError && err.status === 401)) {
          status.textContent = err.message;
          status.className = "error";
        }
      }
    }},
    h("h1", {}, "Sign in to corral"),
    status,
    h("label", {for: "token"}, "API token"),
    input,
    h("button", {type: "submit"}, "Sign in"),
    h("p", {class: "muted"}, "Create a token with ", h("code", {}, "corral token create"),
      ". It is kept in this browser tab only (sessionStorage) and sent to this controller's API."));
    return form;
  };

  // ----- overview

  function heatmapRows(nodes, jobs) {
    const util = new Map(jobs.filter((j) => j.usage && j.usage.gpus).map((j) => [j.id, j.usage.gpu_util_pct]));
    const ids = new Map(jobs.map((j) => [j.id, jobId(j)]));
    const users = new Map(jobs.map((j) => [j.id, j.user]));
    return nodes.map((node) => ({node: node.name, state: node.state,
      note: `${node.state} · ${node.gpus_alloc}/${node.gpus.length} allocated${node.drain_reason ? ` · ${node.drain_reason}` : ""}`,
      cells: node.gpus.map((gpu) => ({
      index: gpu.index, model: gpu.model, job: gpu.allocated_to ? ids.get(gpu.allocated_to) || String(gpu.allocated_to) : null,
      user: gpu.allocated_to ? users.get(gpu.allocated_to) || null : null,
      state: node.state,
      util: gpu.allocated_to ? util.get(gpu.allocated_to) : null}))}));
  }

  // Who holds each GPU, a row per job: the heatmap's legend of holders.
  function gpuHolders(nodes, jobs) {
    const held = new Map();
    for (const node of nodes) {
      for (const gpu of node.gpus) {
        if (!gpu.allocated_to) continue;
        if (!held.has(gpu.allocated_to)) held.set(gpu.allocated_to, new Map());
        const onNode = held.get(gpu.allocated_to);
        if (!onNode.has(node.name)) onNode.set(node.name, []);
        onNode.get(node.name).push(gpu.index);
      }
    }
    const byId = new Map(jobs.map((j) => [j.id, j]));
    const rows = [...held.entries()].sort(([a], [b]) => a - b).map(([id, onNode]) => {
      const job = byId.get(id);
      const where = [...onNode.entries()].map(([node, indexes]) => `${node}: ${indexes.join(",")}`).join("; ");
      return h("tr", {"data-holder": job ? jobId(job) : String(id)},
        h("td", {}, job ? jobLink(job) : String(id)), h("td", {}, job ? job.user : "—"),
        h("td", {}, job ? job.name : ""), h("td", {}, job ? job.account : ""), h("td", {}, where));
    });
    return h("div", {class: "holders"}, h("h3", {}, "Who holds the GPUs"),
      table(["Job", "User", "Name", "Account", "GPUs"], rows, "no GPU is allocated"));
  }

  Corral.pages.overview = async () => {
    const [nodes, jobs, history] = await Promise.all([api("/nodes"), api("/jobs?states=RUNNING,COMPLETING"),
      api("/utilisation")]);
    const gpus = nodes.reduce((n, node) => n + node.gpus.length, 0);
    const allocated = nodes.reduce((n, node) => n + node.gpus_alloc, 0);
    const up = nodes.filter((n) => n.state !== "down").length;
    const samples = history.samples;
    const now = Date.now() / 1000;
    return h("div", {},
      h("div", {class: "stats"},
        stat("nodes up", `${up} / ${nodes.length}`),
        stat("GPUs allocated", `${allocated} / ${gpus}`, gpus ? `${Math.round(allocated / gpus * 100)}%` : null),
        stat("jobs running", h("a", {href: "#/jobs?states=RUNNING"}, String(history.running_jobs))),
        stat("jobs pending", h("a", {href: "#/jobs?states=PENDING"}, String(history.pending_jobs)))),
      section("GPUs by node",
        nodes.length ? charts.heatmap(heatmapRows(nodes, jobs)) : h("p", {class: "empty"}, "no nodes have registered"),
        charts.legend([["free", charts.COLOURS.free], ["allocated, 10% busy", charts.busyColour(10)],
          ["allocated, 90% busy", charts.busyColour(90)], ["allocated, not sampled", charts.COLOURS.unsampled],
          ["drained", charts.COLOURS.drained], ["down", charts.COLOURS.down]]),
        h("p", {class: "muted"}, "Busy: the GPU utilisation of the job holding the GPU, as its node last sampled it. " +
          "Point at a GPU to see its job and user."),
        gpuHolders(nodes, jobs)),
      section("GPUs allocated over time",
        charts.lineChart([
          {name: "allocated GPUs", colour: "#2c6fd1",
            points: samples.map((s) => [s.time, s.gpus_alloc])},
          {name: "GPUs on nodes that are up", colour: "#9aa5b1",
            points: samples.map((s) => [s.time, s.gpus_total])}],
        {step: true, integer: true, until: now, width: 1180, height: 220, label: "allocated GPUs over time", empty: "no samples yet"}),
        charts.legend([["allocated GPUs", "#2c6fd1"], ["GPUs on nodes that are up", "#9aa5b1"]]),
        h("p", {class: "muted"}, `The last hour, one sample per ${history.step_s} s, kept in the controller's memory.`)));
  };

  // ----- jobs

  function jobFilters(params) {
    const field = (name, label, placeholder) => h("label", {}, label,
      h("input", {name, value: params.get(name) || "", placeholder, size: 12}));
    const state = h("select", {name: "states"}, h("option", {value: ""}, "any"),
      STATES.map((s) => h("option", {value: s, selected: params.get("states") === s}, s)));
    return h("form", {class: "filters", onsubmit: (event) => {
      event.preventDefault();
      const query = new URLSearchParams();
      for (const [key, value] of new FormData(event.target)) if (value) query.set(key, value);
      location.hash = `#/jobs?${query}`;
    }},
    field("user", "User", "any"), field("accounts", "Account", "any"),
    h("label", {}, "State", state),
    h("label", {}, "Finished jobs", h("select", {name: "ended"},
      Object.entries(ENDED).map(([value, [label]]) => h("option", {value, selected: (params.get("ended") || "") === value}, label)))),
    h("button", {type: "submit"}, "Filter"),
    Corral.me ? h("a", {href: `#/jobs?user=${encodeURIComponent(Corral.me.name)}&ended=1d`}, "my jobs") : null);
  }

  // Which finished jobs the list adds: none (the queue, as squeue), those that ended within a window (as
  // sacct --starttime; read from the accounting), or all of them.
  const ENDED = {"": ["none", null], "1h": ["last hour", 3600], "1d": ["last day", 86400],
    "7d": ["last 7 days", 7 * 86400], "all": ["all", null]};

  function jobsPath(params) {
    const query = new URLSearchParams({limit: String(JOB_LIMIT)});
    for (const key of ["user", "accounts", "states"]) if (params.get(key)) query.set(key, params.get(key));
    const ended = params.get("ended") || "";
    if (ended === "all") query.set("all", "true");
    const [, window_] = ENDED[ended] || ENDED[""];
    if (window_) {
      query.set("since", String(Math.floor(Date.now() / 1000 - window_)));
      return `/accounting?${query}`;
    }
    return `/jobs?${query}`;
  }

  function jobRow(job) {
    const when_ = job.state === "PENDING"
      ? (job.estimated_start ? `starts ~${when(job.estimated_start)}${job.estimated_start_window ? ` (by ${when(job.estimated_start_window[1])})` : ""}` : "—")
      : duration(job.elapsed_s);
    return h("tr", {"data-job": jobId(job)},
      h("td", {}, jobLink(job)), h("td", {}, job.name), h("td", {}, job.user), h("td", {}, job.account),
      h("td", {}, job.partition), h("td", {}, badge(job.state), job.gpu_idle_flagged ? [" ", idleBadge()] : []),
      h("td", {class: "reason"}, job.reason || ""),
      h("td", {class: "num"}, job.total_gpus), h("td", {}, when_), h("td", {}, job.nodelist || ""));
  }

  Corral.pages.jobs = async (_arg, params) => {
    const {body: jobs, headers} = await api(jobsPath(params), {withHeaders: true});
    const more = headers.get("x-next-after");
    jobs.sort((a, b) => b.id - a.id);
    return h("div", {},
      section("Jobs", jobFilters(params),
        table(["Job", "Name", "User", "Account", "Partition", "State", "Reason", "GPUs", "Time / start", "Nodes"],
          jobs.map(jobRow), params.toString() ? "no jobs match these filters" : "no jobs"),
        more ? h("p", {class: "muted"}, `Showing the first ${JOB_LIMIT} jobs by id; narrow the filters to see others.`) : null));
  };

  // ----- services

  function serviceLink(name) { return h("a", {href: `#/service/${encodeURIComponent(name)}`}, name); }

  function ports(spec) {
    return spec.ports.map((p) => `${p.name}:${p.port || "any"}`).join(", ") || "—";
  }

  function rate(load) {
    return load ? `${load.rps.toFixed(1)} req/s, ${load.inflight} in flight` : "—";
  }

  Corral.pages.services = async () => {
    const services = await api("/services");
    const rows = services.map((s) => h("tr", {"data-service": s.name},
      h("td", {}, serviceLink(s.name)), h("td", {}, s.user), h("td", {}, s.account || "—"),
      h("td", {class: "num"}, `${s.ready_replicas} / ${s.desired_replicas}`), h("td", {class: "num"}, s.revision),
      h("td", {}, ports(s.spec)), h("td", {}, rate(s.load)), h("td", {class: "reason"}, s.reason || "")));
    return section("Services", table(["Service", "User", "Account", "Ready", "Revision", "Ports", "Requests",
      "Waiting because"], rows, "no services"),
    h("p", {class: "muted"}, "Each replica is a job in the service's account and quota. Apply one with ",
      h("code", {}, "corral service apply -f svc.toml"), "."));
  };

  function probeCell(replica) {
    if (!replica.probes.length) return "—";
    return replica.probes.map((p) => h("span", {class: `probe ${p.ok ? "ok" : "failed"}`,
      title: p.detail || (p.ok ? "passing" : "failing")},
    `${p.kind} ${p.ok ? "ok" : `failed${p.consecutive ? ` ×${p.consecutive}` : ""}`}${!p.ok && p.detail ? ` (${p.detail})` : ""}`));
  }

  function replicaRow(r) {
    return h("tr", {"data-replica": r.index, "data-job": r.job_id},
      h("td", {class: "num"}, r.index), h("td", {}, r.job_id ? jobLink({id: r.job_id}) : "—"),
      h("td", {class: "num"}, r.revision), h("td", {}, r.node || "—"), h("td", {}, badge(r.state)),
      h("td", {}, r.ready ? badge("ready") : badge("not ready")), h("td", {class: "num"}, r.restarts),
      h("td", {}, probeCell(r)),
      h("td", {}, Object.entries(r.endpoints).map(([name, where]) => `${name} ${where}`).join(", ") || "—"),
      h("td", {class: "reason"}, r.reason || ""));
  }

  Corral.pages.service = async (name) => {
    const s = await api(`/services/${encodeURIComponent(decodeURIComponent(name))}`);
    const gateway = await Corral.gatewayUrl();
    const spec = s.spec;
    const command = spec.command ? spec.command.join(" ") : "(script)";
    return h("div", {},
      h("div", {class: "stats"},
        h("div", {class: "stat"}, h("div", {class: "stat-value"}, `${s.ready_replicas} / ${s.desired_replicas}`),
          h("div", {class: "stat-label"}, "replicas ready")),
        h("div", {class: "stat"}, h("div", {class: "stat-value"}, String(s.revision)), h("div", {class: "stat-label"}, "revision")),
        h("div", {class: "stat"}, h("div", {class: "stat-value", id: "service-rate"}, rate(s.load)),
          h("div", {class: "stat-label"}, "requests (the gateway's last report)"))),
      section(`Service ${s.name}`,
        h("dl", {class: "facts"},
          h("dt", {}, "User"), h("dd", {}, s.user), h("dt", {}, "Account"), h("dd", {}, s.account || "—"),
          // A notebook's command is corral notebook's wrapper around JupyterLab: long shell, shown on demand.
          h("dt", {}, "Command"), h("dd", {}, spec.session
            ? h("details", {id: "service-command"}, h("summary", {}, "JupyterLab, in corral notebook's wrapper"),
              h("code", {}, command))
            : h("code", {}, command)),
          h("dt", {}, "Per replica"), h("dd", {}, `${spec.nodes} node(s) × ${spec.gpus_per_node} GPU(s), ${spec.cpus_per_task} CPU(s)`),
          h("dt", {}, "Ports"), h("dd", {}, ports(spec)),
          h("dt", {}, "Gateway"), h("dd", {}, spec.public ? "public: no credential needed" : "a credential of the cluster"),
          h("dt", {}, "Address"), h("dd", {id: "service-address"}, gateway
            ? h("code", {}, `${gateway}/s/${encodeURIComponent(s.name)}/`) : "the cluster names no gateway ([gateway] url)"),
          s.reason ? [h("dt", {}, "Waiting because"), h("dd", {class: "reason"}, s.reason)] : null)),
      section("Replicas", table(["Replica", "Job", "Rev", "Node", "State", "Ready", "Restarts", "Probes", "Endpoint",
        "Reason"], s.replicas.map(replicaRow), "no replicas")),
      section("History", s.history.length ? h("ul", {class: "history"}, s.history.map((line) => h("li", {}, line)))
        : h("p", {class: "empty"}, "nothing yet")));
  };

  // ----- nodes

  Corral.pages.nodes = async () => {
    const nodes = await api("/nodes");
    const operator = Corral.actions.canOperate();  // the API's roles (whoami); the API still decides
    const rows = nodes.map((n) => h("tr", {"data-node": n.name},
      h("td", {}, n.name), h("td", {}, badge(n.state)), h("td", {class: "reason"}, n.drain_reason || ""),
      h("td", {class: "num"}, `${n.gpus_alloc} / ${n.gpus.length}`),
      h("td", {}, [...new Set(n.gpus.map((g) => g.model))].join(", ") || "—"),
      h("td", {class: "num"}, `${n.cpus_alloc} / ${n.cpus}`), h("td", {class: "num"}, `${mib(n.mem_alloc_mib)} / ${mib(n.mem_mib)}`),
      h("td", {}, n.partitions.join(", ")), h("td", {}, ago(n.last_seen)), h("td", {class: "small"}, n.cgroups || ""),
      operator ? h("td", {}, Corral.actions.nodeControls(n)) : null));
    return section("Nodes", table(["Node", "State", "Reason", "GPUs alloc", "GPU model", "CPUs alloc", "Memory alloc",
      "Partitions", "Last heard", "Isolation", operator ? "Drain / resume" : null].filter(Boolean), rows,
    "no nodes have registered"));
  };

  // ----- queues

  // Per resource of a cohort: `borrowed` is what a queue uses past its nominal quota; what the cohort's
  // queues borrow comes from the unused quota of the others, shown as `lent` in proportion to it.
  function queueRows(queues) {
    const rows = [];
    const cohorts = new Map();
    for (const q of queues) {
      const key = q.cohort || `(no cohort: ${q.name})`;
      if (!cohorts.has(key)) cohorts.set(key, []);
      cohorts.get(key).push(q);
    }
    for (const members of cohorts.values()) {
      const resources = [...new Set(members.flatMap((q) => Object.keys(q.nominal).concat(Object.keys(q.usage))))].sort();
      for (const resource of resources) {
        const used = (q) => q.usage[resource] || 0, nominal = (q) => q.nominal[resource] || 0;
        const borrowed = members.reduce((n, q) => n + Math.max(0, used(q) - nominal(q)), 0);
        const unused = members.reduce((n, q) => n + Math.max(0, nominal(q) - used(q)), 0);
        for (const q of members) {
          const lent = unused ? Math.round(borrowed * Math.max(0, nominal(q) - used(q)) / unused) : 0;
          rows.push(h("tr", {"data-queue": q.name},
            h("td", {}, q.cohort || "—"), h("td", {}, q.name), h("td", {}, resource),
            h("td", {class: "num"}, nominal(q)), h("td", {class: "num"}, used(q)),
            h("td", {class: "num"}, Math.max(0, used(q) - nominal(q))), h("td", {class: "num"}, lent),
            h("td", {}, q.borrowing ? "yes" : "no"), h("td", {class: "num"}, q.running_jobs), h("td", {class: "num"}, q.pending_jobs)));
        }
      }
    }
    return rows;
  }

  Corral.pages.queues = async () => {
    const queues = await api("/queues");
    return section("Queues",
      table(["Cohort", "Queue", "Resource", "Nominal", "Used", "Borrowed", "Lent", "May borrow", "Running", "Pending"],
        queueRows(queues), "no quota queues are configured (the tenancy defines none)"),
      h("p", {class: "muted"}, "Borrowed: used past the nominal quota. Lent: the cohort's borrowing, shared among the queues with unused quota in proportion to it."));
  };

  // ----- fair share

  Corral.pages.fairshare = async () => {
    const accounts = await api("/fairshare");
    const rows = accounts.map((a) => h("tr", {"data-account": a.account},
      h("td", {}, a.account), h("td", {}, a.parent || "—"), h("td", {class: "num"}, a.shares),
      h("td", {class: "num"}, a.norm_shares.toFixed(4)), h("td", {class: "num"}, a.raw_usage.toFixed(0)),
      h("td", {class: "num"}, a.norm_usage.toFixed(4)), h("td", {class: "num"}, a.fairshare.toFixed(4))));
    return section("Fair share",
      accounts.length ? charts.pairedBars(accounts.map((a) => ({label: a.account, values: [
        {name: "shares", value: a.norm_shares, colour: "#9aa5b1"},
        {name: "usage", value: a.norm_usage, colour: "#2c6fd1"}]})), {label: "shares vs usage"}) : null,
      accounts.length ? charts.legend([["normalised shares", "#9aa5b1"], ["normalised usage", "#2c6fd1"]]) : null,
      accounts.length ? h("p", {class: "muted"}, "An account above its share of the cluster (usage past shares) gets a lower fair share factor, so a lower priority.") : null,
      table(["Account", "Parent", "Shares", "Norm shares", "Raw usage", "Norm usage", "Fair share factor"], rows,
        "no accounts (the tenancy defines none)"));
  };

  // ----- reservations

  Corral.pages.reservations = async () => {
    const reservations = await api("/reservations");
    const rows = reservations.map((r) => h("tr", {"data-reservation": r.name},
      h("td", {}, r.name), h("td", {}, r.active ? badge("active") : badge("scheduled")),
      h("td", {}, when(r.start)), h("td", {}, when(r.end)), h("td", {}, r.node_names.join(", ")),
      h("td", {}, r.users.join(", ") || "—"), h("td", {}, r.accounts.join(", ") || "—"),
      h("td", {}, r.maintenance ? "maintenance" : "")));
    return section("Reservations", table(["Name", "Status", "Start", "End", "Nodes", "Users", "Accounts", "Kind"], rows,
      "no reservations"));
  };

})();
