"""The tenancy configuration resolved for fast lookups: who may submit where, which queue and QOS a job
lands in, the counted limits it is subject to, and whom it may preempt."""
from __future__ import annotations

from corral.api.tenancy import QosSpec, TenancySpec
from corral.core.model import Cap, QueueQuota, Reason
from corral.engine.records import Job, JobSpec

DEFAULT_ACCOUNT = "default"


class TenancyError(ValueError):
    """A submission names an account, QOS or queue it may not use."""


class Tenancy:
    def __init__(self, spec: TenancySpec) -> None:
        self.spec = spec
        self.accounts = {a.name: a for a in spec.accounts}
        self.users = {u.name: u for u in spec.users}
        self.qos = {q.name: q for q in spec.qos}
        self.queue_specs = {q.name: q for q in spec.queues}
        self.queue_of_account = {a: q.name for q in spec.queues for a in q.accounts}
        self.queues = tuple(
            QueueQuota(q.name, dict(q.nominal), q.cohort, dict(q.borrowing_limit), dict(q.lending_limit))
            for q in spec.queues)
        self.user_limits = {lim.user: lim for lim in spec.limits if lim.user is not None}
        self.account_limits = {lim.account: lim for lim in spec.limits if lim.account is not None}
        # A QOS whose jobs some other QOS may preempt.
        self.preemptible_qos = frozenset(v for q in spec.qos for v in q.preempts)
        self.max_qos_priority = max((q.priority for q in spec.qos), default=0)
        self.walled_qos = frozenset(q.name for q in spec.qos if q.max_wall_s is not None)
        self.cohort_queues = frozenset(q.name for q in spec.queues if q.cohort is not None)

    @property
    def open(self) -> bool:
        """No accounts configured: anyone may submit, every job is in the `default` account."""
        return not self.accounts

    def resolve(self, user: str, account: str | None, qos: str | None, queue: str | None) -> tuple[str, str, str]:
        """(account, qos, queue) for a submission, or TenancyError saying what is wrong."""
        account = self._account(user, account)
        qos_name = qos or self.spec.default_qos
        if qos_name not in self.qos:
            raise TenancyError(f"invalid qos specification: {qos_name!r} (qos: {', '.join(self.qos)})")
        if queue is not None:
            if queue not in self.queue_specs:
                raise TenancyError(f"unknown queue {queue!r}")
            allowed = self.queue_specs[queue].accounts
            if allowed and account not in allowed:
                raise TenancyError(f"account {account!r} may not use queue {queue!r}")
            return account, qos_name, queue
        return account, qos_name, self.queue_of_account.get(account, "")

    def _account(self, user: str, account: str | None) -> str:
        if self.open:
            if account not in (None, DEFAULT_ACCOUNT):
                raise TenancyError(f"invalid account {account!r}: no accounts are configured")
            return DEFAULT_ACCOUNT
        entry = self.users.get(user)
        if entry is None:
            return self._unlisted_user_account(user, account)
        if account is None:
            return entry.default_account or entry.accounts[0]
        if account not in entry.accounts:
            raise TenancyError(f"invalid account or account/partition combination specified: user {user!r} "
                               f"may use {', '.join(entry.accounts)}, not {account!r}")
        return account

    def _unlisted_user_account(self, user: str, account: str | None) -> str:
        default = self.spec.default_account
        if default is None:
            example = next(iter(self.accounts))
            raise TenancyError(
                f"user {user!r} has no association with any account: add [[users]] name = \"{user}\" "
                f"accounts = [\"{example}\"] to the tenancy configuration (the controller's --config file, or "
                f"a file given to 'corral tenancy apply'), or set default_account = \"{example}\" at its top "
                "level for every user without an entry")
        if account not in (None, default):
            raise TenancyError(f"invalid account {account!r}: user {user!r} has no [[users]] entry and may use "
                               f"only {default!r}")
        return default

    def qos_of(self, spec: JobSpec) -> QosSpec:
        return self.qos.get(spec.qos) or self.qos[self.spec.default_qos]

    def ancestors(self, account: str) -> list[str]:
        """The account and its parents up to the root."""
        chain = []
        cur = self.accounts.get(account)
        while cur is not None:
            chain.append(cur.name)
            cur = self.accounts.get(cur.parent) if cur.parent else None
        return chain or [account]

    def caps(self, spec: JobSpec) -> tuple[Cap, ...]:
        gpus = spec.request.total_gpus
        caps: list[Cap] = []
        user = self.user_limits.get(spec.user)
        if user is not None:
            if user.max_running_jobs is not None:
                caps.append(Cap(f"user:{spec.user}:jobs", user.max_running_jobs, 1, Reason.ASSOC_MAX_JOBS))
            if user.max_gpus is not None:
                caps.append(Cap(f"user:{spec.user}:gpus", user.max_gpus, gpus, Reason.ASSOC_GRP_GRES))
        for account in self.ancestors(spec.account):
            limit = self.account_limits.get(account)
            if limit is None:
                continue
            if limit.max_running_jobs is not None:
                caps.append(Cap(f"account:{account}:jobs", limit.max_running_jobs, 1, Reason.ASSOC_GRP_JOBS))
            if limit.max_gpus is not None:
                caps.append(Cap(f"account:{account}:gpus", limit.max_gpus, gpus, Reason.ASSOC_GRP_GRES))
        if spec.array_throttle is not None:
            caps.append(Cap(f"array:{spec.array_job_id}", spec.array_throttle, 1, Reason.ARRAY_TASK_LIMIT))
        return tuple(caps)

    def charges(self, job: Job) -> tuple[tuple[str, int], ...]:
        """What a running job holds against every cap a pending job might carry."""
        spec = job.spec
        gpus = job.gpu_count
        out = [(f"user:{spec.user}:jobs", 1), (f"user:{spec.user}:gpus", gpus)]
        for account in self.ancestors(spec.account):
            out += [(f"account:{account}:jobs", 1), (f"account:{account}:gpus", gpus)]
        if spec.array_throttle is not None:
            out.append((f"array:{spec.array_job_id}", 1))
        return tuple(out)

    def preemptible_from(self, job: Job) -> float | None:
        """From when a running job may be preempted: by a QOS that preempts its QOS, or, in a cohort, by
        a queue reclaiming what the job's queue borrowed. None: never."""
        qos = self.qos_of(job.spec)
        if job.start_time is None:
            return None
        if qos.name not in self.preemptible_qos and job.spec.queue not in self.cohort_queues:
            return None
        return job.start_time + qos.min_runtime_s

    def preempts(self, spec: JobSpec) -> frozenset[str]:
        return frozenset(self.qos_of(spec).preempts)

    def overrides_min_ready(self, spec: JobSpec) -> bool:
        return self.qos_of(spec).overrides_min_ready

    def submit_limits(self, user: str, account: str) -> list[tuple[str, str, int]]:
        """(kind, name, limit) of every max_submit_jobs that applies: the user's, its account's and the
        account's ancestors'."""
        found = []
        user_limit = self.user_limits.get(user)
        if user_limit is not None and user_limit.max_submit_jobs is not None:
            found.append(("user", user, user_limit.max_submit_jobs))
        for name in self.ancestors(account):
            limit = self.account_limits.get(name)
            if limit is not None and limit.max_submit_jobs is not None:
                found.append(("account", name, limit.max_submit_jobs))
        return found
