"use strict";
// A job's page: its state and reason (with the forecast start while it waits), what it asked for, its
// usage now and over time, the tail of its output, its steps and what happened to it.

(() => {
  const {api, h, table, section, badge, when, duration, mib, jobId} = Corral;
  const charts = window.CorralCharts;

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
      h("td", {}, `${jobId(job)}.${step.step_id}`), h("td", {}, step.name || ""), h("td", {}, badge(step.state)),
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

  // A running job's output grows on the page (actions.js follows it).
  function outputBlock(output, job) {
    if (output.error) return h("p", {class: "note", id: "output-unavailable"}, output.error);
    const pre = h("pre", {class: "output", id: "output"}, output.text || "(empty)");
    return h("div", {},
      h("p", {class: "muted"}, `${output.path} on ${output.node}, ${output.size} bytes` +
        (output.truncated ? " (the end of it)" : "")),
      pre, Corral.actions.followOutput(job, output, pre));
  }

  function usageFacts(usage) {
    if (!usage) return h("p", {class: "empty"}, "not sampled (not started, or ended before its first sample)");
    return facts([["samples", usage.samples], ["memory (RSS now / max)", `${mib(Math.round(usage.rss_kib / 1024))} / ${mib(Math.round(usage.max_rss_kib / 1024))}`],
      ["CPU time", duration(usage.cpu_s)], ["GPUs sampled", usage.gpus],
      ["GPU utilisation (now / average / max)", usage.gpus ? `${usage.gpu_util_pct}% / ${usage.ave_gpu_util_pct}% / ${usage.max_gpu_util_pct}%` : "—"],
      ["GPU memory (max)", usage.gpus ? mib(usage.max_gpu_mem_mib) : "—"],
      ["GPUs idle for", usage.gpus && usage.gpu_idle_s ? duration(usage.gpu_idle_s) : null]]);
  }

  // N (a job's own id) or N_I (task I of array N), as the command line takes them; the page shows the job
  // by the id the command line shows.
  async function jobNamed(id) {
    if (/^\d+$/.test(id)) return api(`/jobs/${id}`);
    if (!/^\d+_\d+$/.test(id)) throw new Error(`"${id}" is not a job id: expected N or N_I (task I of array N)`);
    const [job] = await api(`/jobs?ids=${id}&all=true`);
    if (!job) throw new Error(`no job ${id}: array ${id.split("_")[0]} has no task ${id.split("_")[1]}`);
    return job;
  }

  Corral.pages.job = async (id) => {
    const job = await jobNamed(id);  // first: an unknown job is said once, as such
    const [telemetry, output] = await Promise.all([api(`/jobs/${job.id}/telemetry`),
      api(`/jobs/${job.id}/output?tail_bytes=16384`, {allowErrors: true})]);
    // A forecast comes with a window holding the actual start for about 80 % of jobs: users plan by its late end.
    const window_ = job.estimated_start_window
      ? `, between ${when(job.estimated_start_window[0])} and ${when(job.estimated_start_window[1])}` : "";
    const forecast = job.state === "PENDING" && job.estimated_start
      ? `${when(job.estimated_start)} (${job.estimated_start_source === "forecast" ? "forecast with predicted runtimes" : "the scheduler's reservation"}${window_})`
      : (job.state === "PENDING" ? "none yet (the scheduler has not planned a start)" : null);
    return h("div", {},
      h("h1", {class: "job-title"}, `Job ${jobId(job)}`, " ", h("span", {class: "job-name"}, job.name), " ", badge(job.state),
        job.gpu_idle_flagged ? [" ", idleBadge()] : []),
      Corral.actions.jobControls(job),
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
      section("Output (tail)", outputBlock(output, job)),
      section("Steps", table(["Step", "Name", "State", "Nodes", "Tasks", "Start", "End", "Exit"], stepRows(job), "no steps")),
      section("History", table(["Time", "Event", "Details"], historyRows(job), "")));
  };
})();
