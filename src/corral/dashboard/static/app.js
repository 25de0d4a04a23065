"use strict";
// The dashboard's core: the token, API calls, the router and small DOM and formatting helpers. Every value
// from the API goes into the page as text (textContent), never as HTML. Pages: pages.js; charts: charts.js.

const API = "/api/v1";
const TOKEN_KEY = "corral.token";
const Corral = {pages: {}};

class ApiError extends Error {
  constructor(path, status, detail, method = "GET") {
    super(`${method} ${path} failed (${status}): ${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

function token() { return sessionStorage.getItem(TOKEN_KEY); }

// A 401 sends the user to the login page with the API's reason; anything else throws ApiError, or with
// `allowErrors` comes back as {error, status}. `withHeaders`: {body, headers}. `method` and `body` (sent as
// JSON): the actions (actions.js) go through the same routes and roles as the command line.
async function api(path, {allowErrors = false, withHeaders = false, method = "GET", body = undefined} = {}) {
  const tok = token();
  if (!tok) { toLogin("Paste an API token to sign in."); throw new ApiError(path, 401, "no token", method); }
  const headers = {Authorization: `Bearer ${tok}`, Accept: "application/json"};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let reply;
  try {
    reply = await fetch(API + path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
  } catch (err) {
    throw new ApiError(path, 0, `the controller cannot be reached (${err.message})`, method);
  }
  const answer = await reply.json().catch(() => ({detail: reply.statusText}));
  if (reply.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    toLogin(`Your token was refused: ${answer.detail || "not authenticated"}. Paste a valid token.`);
    throw new ApiError(path, 401, answer.detail, method);
  }
  if (reply.status === 421) {  // a standby: it serves no data, the leader does
    const leader = answer.leader ? ` Open the dashboard of the leader, ${answer.leader}.` : " No leader is known yet.";
    throw new ApiError(path, 421, `this controller is a standby.${leader}`, method);
  }
  if (!reply.ok) {
    if (allowErrors) return {error: answer.detail || reply.statusText, status: reply.status};
    throw new ApiError(path, reply.status, answer.detail || reply.statusText, method);
  }
  return withHeaders ? {body: answer, headers: reply.headers} : answer;
}

function toLogin(message) {
  sessionStorage.setItem("corral.loginMessage", message);
  if (location.hash !== "#/login") location.hash = "#/login";
  else route();
}

// h("td", {class: "x", title: "y"}, "text", child, ...): an element; strings become text nodes.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// A table, or `empty` in its place when there are no rows.
function table(headers, rows, empty) {
  if (!rows.length) return h("p", {class: "empty"}, empty);
  return h("table", {class: "grid"},
    h("thead", {}, h("tr", {}, headers.map((name) => h("th", {}, name)))),
    h("tbody", {}, rows));
}

function section(title, ...children) {
  return h("section", {class: "card"}, h("h2", {}, title), ...children);
}

function badge(state) {
  const text = String(state || "").toLowerCase();
  return h("span", {class: `badge s-${text.replace(/[^a-z]/g, "")}`}, state);
}

// A running job whose GPUs have stayed idle for the controller's gpu_idle_flag_s (the API's gpu_idle_flagged).
function idleBadge() {
  return h("span", {class: "badge s-gpuidle", title: "its GPUs have stayed under 5 % for the configured time"},
    "GPUs idle");
}

function pad(n) { return String(n).padStart(2, "0"); }

function when(epoch) {
  if (epoch === null || epoch === undefined) return "—";
  const d = new Date(epoch * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// Slurm's [D-]HH:MM:SS.
function duration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  let s = Math.max(0, Math.round(seconds));
  const days = Math.floor(s / 86400); s %= 86400;
  const text = `${pad(Math.floor(s / 3600))}:${pad(Math.floor((s % 3600) / 60))}:${pad(s % 60)}`;
  return days ? `${days}-${text}` : text;
}

function ago(epoch) {
  if (!epoch) return "never";
  return `${duration(Date.now() / 1000 - epoch)} ago`;
}

// A job's id as the command line writes it: N_I for task I of array N (each task has a raw id of its own,
// which no command shows), else N.
function jobId(job) {
  const task = job.array_job_id !== null && job.array_job_id !== undefined &&
    job.array_task_id !== null && job.array_task_id !== undefined;
  return task ? `${job.array_job_id}_${job.array_task_id}` : String(job.id);
}

function mib(value) {
  if (value === null || value === undefined) return "—";
  return value >= 1024 ? `${(value / 1024).toFixed(1)} GiB` : `${value} MiB`;
}

function errorBox(err) {
  return h("div", {class: "error", role: "alert"}, err.message || String(err));
}

function setActiveNav(page) {
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("active", link.dataset.page === page);
  }
}

async function showIdentity() {
  const me = await api("/whoami");
  const roles = me.roles.length ? ` (${me.roles.join(", ")})` : "";
  document.getElementById("whoami").textContent = `${me.name}${roles}`;
  document.getElementById("logout").hidden = false;
  Corral.me = me;
  return me;
}

// #/page/arg?query: the page's name, its argument and its query parameters.
function parseHash() {
  const [path, query] = (location.hash.replace(/^#\/?/, "") || "overview").split("?");
  const [page, ...rest] = path.split("/");
  return {page: page || "overview", arg: rest.join("/"), params: new URLSearchParams(query || "")};
}

let routeSeq = 0;
let refreshTimer = null;
const REFRESH_S = 15;

// Render the page the hash names; `quiet`: a refresh of the same page (no "Loading…" in between).
async function route(quiet = false) {
  const {page, arg, params} = parseHash();
  const view = document.getElementById("view");
  const seq = ++routeSeq;
  clearTimeout(refreshTimer);
  setActiveNav({job: "jobs", service: "services"}[page] || page);
  if (page === "login") { view.replaceChildren(Corral.pages.login()); return; }
  const render = Corral.pages[page];
  if (!render) { view.replaceChildren(errorBox(new Error(`no page named "${page}"`))); return; }
  if (!token()) { toLogin("Paste an API token to sign in."); return; }
  if (quiet !== true) view.replaceChildren(h("p", {class: "muted"}, "Loading…"));
  try {
    if (!Corral.me) await showIdentity();
    const content = await render(arg, params);
    if (seq !== routeSeq) return;
    view.replaceChildren(content, h("p", {class: "updated"},
      `Updated ${when(Date.now() / 1000).slice(11)}; refreshed every ${REFRESH_S} s.`));
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return;  // on the login page already
    if (seq === routeSeq) view.replaceChildren(errorBox(err));
  }
  if (seq === routeSeq) refreshTimer = setTimeout(refresh, REFRESH_S * 1000);
}

// Not while the user types in a form of the page, nor while the tab is hidden: later.
function refresh() {
  const typing = document.activeElement && document.activeElement.closest("#view form");
  if (typing || document.hidden) refreshTimer = setTimeout(refresh, REFRESH_S * 1000);
  else route(true);
}

function logout() {
  sessionStorage.removeItem(TOKEN_KEY);
  Corral.me = null;
  document.getElementById("whoami").textContent = "";
  document.getElementById("logout").hidden = true;
  toLogin("Signed out.");
}

// The controller's /health, read once per page load: the cluster's name, and the services' gateway as the
// browser reaches it ([gateway] url; null where none is configured), from which pages build their links.
let healthRead = null;
function health() {
  if (!healthRead) healthRead = fetch("/health").then((r) => r.json()).catch(() => ({}));
  return healthRead;
}

async function gatewayUrl() {
  const url = (await health()).gateway_url;
  return url ? url.replace(/\/+$/, "") : null;
}

async function start() {
  document.getElementById("logout").addEventListener("click", logout);
  health().then((info) => {
    if (info.cluster) document.getElementById("cluster").textContent = `${info.cluster} · ${info.role}`;
  });
  window.addEventListener("hashchange", () => route());
  route();
}

Object.assign(Corral, {api, h, append, table, section, badge, when, duration, ago, mib, jobId, errorBox, token,
  TOKEN_KEY, showIdentity, route, ApiError, gatewayUrl});
document.addEventListener("DOMContentLoaded", start);
