"use strict";
// The dashboard's pages: each reads the REST API as the signed-in user and returns its content. What a
// user sees is what the API shows that user: the dashboard adds no rule of its own.

(() => {
  const {api, h, table, section, badge, when, duration, ago, mib} = Corral;
  const charts = window.CorralCharts;
  const STATES = ["PENDING", "RUNNING", "COMPLETING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
    "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"];
  const JOB_LIMIT = 500;

  function stat(label, value, note) {
    return h("div", {class: "stat"}, h("div", {class: "stat-value"}, value), h("div", {class: "stat-label"}, label),
      note ? h("div", {class: "stat-note"}, note) : null);
  }

  function jobLink(id) { return h("a", {href: `#/job/${id}`}, String(id)); }

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
    return nodes.map((node) => ({node: node.name, state: node.state,
      note: `${node.state} · ${node.gpus_alloc}/${node.gpus.length} allocated${node.drain_reason ? ` · ${node.drain_reason}` : ""}`,
      cells: node.gpus.map((gpu) => ({
      index: gpu.index, model: gpu.model, job: gpu.allocated_to, state: node.state,
      util: gpu.allocated_to ? util.get(gpu.allocated_to) : null}))}));
  }

  Corral.pages.overview = async () => {
    const [nodes, jobs, history] = await Promise.all([api("/nodes"), api("/jobs"), api("/utilisation")]);
    const gpus = nodes.reduce((n, node) => n + node.gpus.length, 0);
    const allocated = nodes.reduce((n, node) => n + node.gpus_alloc, 0);
    const up = nodes.filter((n) => n.state !== "down").length;
    const count = (state) => jobs.filter((j) => j.state === state).length;
    const samples = history.samples;
    const now = Date.now() / 1000;
    return h("div", {},
      h("div", {class: "stats"},
        stat("nodes up", `${up} / ${nodes.length}`),
        stat("GPUs allocated", `${allocated} / ${gpus}`, gpus ? `${Math.round(allocated / gpus * 100)}%` : null),
        stat("jobs running", count("RUNNING")),
        stat("jobs pending", count("PENDING"))),
      section("GPUs by node",
        nodes.length ? charts.heatmap(heatmapRows(nodes, jobs)) : h("p", {class: "empty"}, "no nodes have registered"),
        charts.legend([["free", charts.COLOURS.free], ["allocated, 10% busy", charts.busyColour(10)],
          ["allocated, 90% busy", charts.busyColour(90)], ["allocated, not sampled", charts.COLOURS.unsampled],
          ["drained", charts.COLOURS.drained], ["down", charts.COLOURS.down]]),
        h("p", {class: "muted"}, "Busy: the GPU utilisation of the job holding the GPU, as its node last sampled it.")),
      section("GPU utilisation over time",
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
    h("label", {class: "check"}, h("input", {type: "checkbox", name: "all", value: "1", checked: params.get("all") === "1"}),
      "include finished jobs"),
    h("button", {type: "submit"}, "Filter"),
    Corral.me ? h("a", {href: `#/jobs?user=${encodeURIComponent(Corral.me.name)}&all=1`}, "my jobs") : null);
  }

  function jobRow(job) {
    const when_ = job.state === "PENDING"
      ? (job.estimated_start ? `starts ~${when(job.estimated_start)}` : "—")
      : duration(job.elapsed_s);
    return h("tr", {"data-job": job.id},
      h("td", {}, jobLink(job.id)), h("td", {}, job.name), h("td", {}, job.user), h("td", {}, job.account),
      h("td", {}, job.partition), h("td", {}, badge(job.state)), h("td", {class: "reason"}, job.reason || ""),
      h("td", {class: "num"}, job.total_gpus), h("td", {}, when_), h("td", {}, job.nodelist || ""));
  }

  Corral.pages.jobs = async (_arg, params) => {
    const query = new URLSearchParams({limit: String(JOB_LIMIT)});
    for (const key of ["user", "accounts", "states"]) if (params.get(key)) query.set(key, params.get(key));
    if (params.get("all") === "1") query.set("all", "true");
    const jobs = await api(`/jobs?${query}`);
    const more = Corral.lastHeaders && Corral.lastHeaders.get("x-next-after");
    jobs.sort((a, b) => b.id - a.id);
    return h("div", {},
      section("Jobs", jobFilters(params),
        table(["Job", "Name", "User", "Account", "Partition", "State", "Reason", "GPUs", "Time / start", "Nodes"],
          jobs.map(jobRow), params.toString() ? "no jobs match these filters" : "no jobs"),
        more ? h("p", {class: "muted"}, `Showing the first ${JOB_LIMIT} jobs by id; narrow the filters to see others.`) : null));
  };

  // ----- one job

  function facts(pairs) {
    return h("dl", {class: "facts"}, pairs.filter(([, v]) => v !== null && v !== undefined && v !== "")
      .map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  }

  // What happened, oldest first: submission, start and end from the job's times, and the events of its
  // history (preemptions, requeues, signals, node failures...).
  function historyRows(job) {
    const events = [{t: job.submit_time, event: "submitted"}];
    if (job.start_time) events.push({t: job.start_time, event: "started", nodes: job.nodelist});
    for (const entry of job.history) events.push(entry);
    if (job.end_time) events.push({t: job.end_time, event: job.state.toLowerCase(), exit: `${job.exit_code}:${job.exit_signal}`});
    events.sort((a, b) => (a.t ?? 0) - (b.t ?? 0));
    const detail = ([key, value]) => {
      const epoch = typeof value === "number" && value > 1e9 && /start|end|time/.test(key);
      return `${key} ${epoch ? when(value) : (typeof value === "object" ? JSON.stringify(value) : value)}`;
    };
    return events.map((event) => h("tr", {},
      h("td", {}, when(event.t)), h("td", {}, event.event || ""),
      h("td", {}, Object.entries(event).filter(([k, v]) => k !== "t" && k !== "event" && v !== "" && v !== null)
        .map(detail).join(", "))));
  }

  function stepRows(job) {
    return job.steps.map((step) => h("tr", {},
      h("td", {}, `${job.id}.${step.step_id}`), h("td", {}, step.name || ""), h("td", {}, badge(step.state)),
      h("td", {}, step.nodelist || ""), h("td", {class: "num"}, step.num_tasks ?? ""),
      h("td", {}, when(step.start_time)), h("td", {}, when(step.end_time)),
      h("td", {}, `${step.exit_code ?? 0}:${step.exit_signal ?? 0}`)));
  }

  function telemetryCharts(samples) {
    if (!samples.length) return null;
    const gpu = samples.filter((s) => s.gpus > 0).map((s) => [s.time, s.gpu_util_pct]);
    const rss = samples.map((s) => [s.time, s.rss_kib / 1024]);
    const cpu = [];
    for (let i = 1; i < samples.length; i++) {
      const dt = samples[i].time - samples[i - 1].time;
      if (dt > 0) cpu.push([samples[i].time, Math.max(0, (samples[i].cpu_s - samples[i - 1].cpu_s) / dt * 100)]);
    }
    const small = {width: 360, height: 160};
    return h("div", {class: "telemetry"},
      h("figure", {}, h("figcaption", {}, "GPU utilisation (%)"),
        charts.lineChart([{name: "GPU %", colour: "#2c6fd1", points: gpu}],
          {...small, yMax: 100, unit: "%", label: "GPU utilisation", empty: "no GPU samples"})),
      h("figure", {}, h("figcaption", {}, "Memory (RSS, MiB)"),
        charts.lineChart([{name: "RSS MiB", colour: "#8e44ad", points: rss}],
          {...small, label: "memory", empty: "no samples"})),
      h("figure", {}, h("figcaption", {}, "CPU (% of one core)"),
        charts.lineChart([{name: "CPU %", colour: "#16a085", points: cpu}],
          {...small, unit: "%", label: "CPU", empty: "fewer than two samples"})));
  }

  function outputBlock(output) {
    if (output.error) return h("p", {class: "note", id: "output-unavailable"}, output.error);
    return h("div", {},
      h("p", {class: "muted"}, `${output.path} on ${output.node}, ${output.size} bytes` +
        (output.truncated ? " (the end of it)" : "")),
      h("pre", {class: "output", id: "output"}, output.text || "(empty)"));
  }

  function usageFacts(usage) {
    if (!usage) return h("p", {class: "empty"}, "not sampled (not started, or ended before its first sample)");
    return facts([["samples", usage.samples], ["memory (RSS now / max)", `${mib(Math.round(usage.rss_kib / 1024))} / ${mib(Math.round(usage.max_rss_kib / 1024))}`],
      ["CPU time", duration(usage.cpu_s)], ["GPUs sampled", usage.gpus],
      ["GPU utilisation (now / average / max)", usage.gpus ? `${usage.gpu_util_pct}% / ${usage.ave_gpu_util_pct}% / ${usage.max_gpu_util_pct}%` : "—"],
      ["GPU memory (max)", usage.gpus ? mib(usage.max_gpu_mem_mib) : "—"]]);
  }

  Corral.pages.job = async (id) => {
    if (!/^\d+$/.test(id)) throw new Error(`"${id}" is not a job id`);
    const [job, telemetry, output] = await Promise.all([api(`/jobs/${id}`), api(`/jobs/${id}/telemetry`),
      api(`/jobs/${id}/output?tail_bytes=16384`, {allowErrors: true})]);
    const forecast = job.state === "PENDING" && job.estimated_start
      ? `${when(job.estimated_start)} (${job.estimated_start_source === "forecast" ? "forecast with predicted runtimes" : "the scheduler's reservation"})`
      : (job.state === "PENDING" ? "none yet (the scheduler has not planned a start)" : null);
    return h("div", {},
      h("h1", {class: "job-title"}, `Job ${job.id}`, " ", h("span", {class: "job-name"}, job.name), " ", badge(job.state)),
      h("div", {class: "columns"},
        section("Status", facts([["state", job.state], ["reason", job.reason || "None"],
          ["reason detail", job.reason_detail], ["forecast start", forecast], ["position in queue", job.position],
          ["held", job.held ? "yes" : null], ["exit code", job.state === "PENDING" || job.state === "RUNNING" ? null : `${job.exit_code}:${job.exit_signal}`],
          ["submitted", when(job.submit_time)], ["started", when(job.start_time)], ["ended", when(job.end_time)],
          ["elapsed / limit", `${duration(job.elapsed_s)} / ${duration(job.time_limit_s)}`]])),
        section("Request", facts([["user", `${job.user} (uid ${job.uid})`], ["account", job.account], ["QOS", job.qos],
          ["partition", job.partition], ["queue", job.queue], ["nodes", `${job.num_nodes} × ${job.tasks_per_node} tasks`],
          ["GPUs", `${job.total_gpus} (${job.gpus_per_node} per node)${job.gpu_share ? ` ${job.gpu_share}` : ""}`],
          ["CPUs per task", job.cpus_per_task], ["memory per node", mib(job.mem_per_node_mib)],
          ["allocation", job.slices.map((s) => `${s.node}: GPUs ${s.gpus.join(",") || "none"}`).join("; ")],
          ["dependency", job.dependency], ["reservation", job.reservation], ["workdir", job.workdir],
          ["GPU-hours", (job.gpu_seconds / 3600).toFixed(2)]]))),
      section("Usage", usageFacts(job.usage), telemetryCharts(telemetry.samples)),
      section("Output (tail)", outputBlock(output)),
      section("Steps", table(["Step", "Name", "State", "Nodes", "Tasks", "Start", "End", "Exit"], stepRows(job), "no steps")),
      section("History", table(["Time", "Event", "Details"], historyRows(job), "")));
  };

  // ----- nodes

  Corral.pages.nodes = async () => {
    const nodes = await api("/nodes");
    const rows = nodes.map((n) => h("tr", {"data-node": n.name},
      h("td", {}, n.name), h("td", {}, badge(n.state)), h("td", {class: "reason"}, n.drain_reason || ""),
      h("td", {class: "num"}, `${n.gpus_alloc} / ${n.gpus.length}`),
      h("td", {}, [...new Set(n.gpus.map((g) => g.model))].join(", ") || "—"),
      h("td", {class: "num"}, `${n.cpus_alloc} / ${n.cpus}`), h("td", {class: "num"}, `${mib(n.mem_alloc_mib)} / ${mib(n.mem_mib)}`),
      h("td", {}, n.partitions.join(", ")), h("td", {}, ago(n.last_seen)), h("td", {class: "small"}, n.cgroups || "")));
    return section("Nodes", table(["Node", "State", "Reason", "GPUs alloc", "GPU model", "CPUs alloc", "Memory alloc",
      "Partitions", "Last heard", "Isolation"], rows, "no nodes have registered"));
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
