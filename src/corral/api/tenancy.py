"""Organisation, QOS, queues with quota, limits and priority weights: the tenancy configuration.

The same shape is read from the controller's TOML file (top-level tables `[[accounts]]`, `[[users]]`,
`[[qos]]`, `[[queues]]`, `[[limits]]`, `[priority]`) and exchanged over the API (GET/PUT /tenancy).
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from corral.api.fields import Amount, Count, DurationS, EpochS, Name, Names, Priority, TimeLimitS
from corral.limits import AMOUNT_MAX, INT32_MAX, LIST_MAX_ITEMS

DAY_S = 86400
# Quota amounts are integers 0..AMOUNT_MAX; priority weights 0..2^31-1; billing weights finite.
QuotaAmounts = Annotated[dict[Name, Annotated[int, Field(ge=0, le=AMOUNT_MAX)]],
                         Field(max_length=LIST_MAX_ITEMS)]
Weight = Annotated[int, Field(ge=0, le=INT32_MAX)]
BillingWeight = Annotated[float, Field(ge=0, le=INT32_MAX, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AccountSpec(_Strict):
    name: Name
    parent: Name | None = None  # None: a child of the root
    shares: Count = 1
    coordinators: Names = []  # users who may act on this account's (and its sub-accounts') jobs


class UserSpec(_Strict):
    name: Name
    accounts: Names = Field(min_length=1)
    default_account: Name | None = None  # default: the first of `accounts`


class QosSpec(_Strict):
    name: Name
    priority: Priority = 0
    preempts: Names = []  # QOS names whose jobs this QOS's jobs may preempt
    preempt_mode: Literal["requeue", "cancel"] = "requeue"  # what happens to this QOS's jobs when preempted
    grace_s: DurationS = 60.0  # SIGTERM, then SIGKILL after this long
    min_runtime_s: DurationS = 0.0  # never preempted before running this long
    # May preempt a service's replicas below its min_ready (its disruption budget); else never.
    overrides_min_ready: bool = False
    max_wall_s: TimeLimitS | None = None


class QueueSpec(_Strict):
    name: Name
    cohort: Name | None = None
    accounts: Names = []  # jobs of these accounts go to this queue unless they name another
    # resource ("gpu", "cpu", "mem_mib", or "gpu:<model>" for a GPU-model flavor) -> amount; flavors are
    # tried in the order written
    nominal: QuotaAmounts
    borrowing_limit: QuotaAmounts = {}
    lending_limit: QuotaAmounts = {}


class LimitSpec(_Strict):
    user: Name | None = None
    account: Name | None = None
    max_running_jobs: Amount | None = None
    max_submit_jobs: Amount | None = None
    max_gpus: Amount | None = None

    @model_validator(mode="after")
    def _one_subject(self) -> "LimitSpec":
        if (self.user is None) == (self.account is None):
            raise ValueError("a limit names exactly one of user or account")
        return self


class PriorityWeights(_Strict):
    weight_age: Weight = 1000
    weight_fairshare: Weight = 10000
    weight_job_size: Weight = 0
    # The job-size factor's measure: "gpus" (the share of the cluster's GPUs a job asks for) or "gpu_time"
    # (GPUs x time limit, what the user asked for, on a log scale from 1 GPU-second to the whole cluster for
    # a year). favor_small (Slurm's PriorityFavorSmall) turns it around: the smaller, the higher.
    job_size_basis: Literal["gpus", "gpu_time"] = "gpus"
    favor_small: bool = False
    weight_partition: Weight = 0
    weight_qos: Weight = 0
    max_age_s: DurationS = Field(7 * DAY_S, gt=0)
    half_life_s: DurationS = Field(7 * DAY_S, gt=0)  # fair-share usage decay
    calc_period_s: DurationS = Field(60.0, gt=0)  # how often pending jobs' priorities are recomputed
    # Billing per resource-second for fair share: usage = sum(weight * amount * seconds).
    billing: Annotated[dict[Name, BillingWeight], Field(max_length=LIST_MAX_ITEMS)] = {"gpu": 1.0}


class TenancySpec(_Strict):
    accounts: Annotated[list[AccountSpec], Field(max_length=LIST_MAX_ITEMS)] = []
    users: Annotated[list[UserSpec], Field(max_length=LIST_MAX_ITEMS)] = []
    qos: Annotated[list[QosSpec], Field(max_length=LIST_MAX_ITEMS)] = [QosSpec(name="normal")]
    default_qos: Name = "normal"
    # The account of users without a [[users]] entry; None: such users may not submit (as in Slurm with
    # AccountingStorageEnforce=associations).
    default_account: Name | None = None
    queues: Annotated[list[QueueSpec], Field(max_length=LIST_MAX_ITEMS)] = []
    limits: Annotated[list[LimitSpec], Field(max_length=LIST_MAX_ITEMS)] = []
    priority: PriorityWeights = PriorityWeights()

    @model_validator(mode="after")
    def _consistent(self) -> "TenancySpec":
        check_tenancy(self)
        return self


def check_tenancy(spec: TenancySpec) -> None:
    accounts = {a.name: a for a in spec.accounts}
    _unique("account", [a.name for a in spec.accounts])
    _unique("user", [u.name for u in spec.users])
    _unique("qos", [q.name for q in spec.qos])
    _unique("queue", [q.name for q in spec.queues])
    _check_accounts(spec, accounts)
    _check_users(spec, accounts)
    _check_qos(spec)
    _check_queues(spec, accounts)
    for limit in spec.limits:
        if limit.account is not None and limit.account not in accounts:
            raise ValueError(f"limit for unknown account {limit.account!r}")


def _check_accounts(spec: TenancySpec, accounts: dict[str, AccountSpec]) -> None:
    for a in spec.accounts:
        if a.parent is not None and a.parent not in accounts:
            raise ValueError(f"account {a.name!r}: unknown parent {a.parent!r}")
    for a in spec.accounts:  # cycles
        seen, cur = set(), a
        while cur.parent is not None:
            if cur.name in seen:
                raise ValueError(f"account {a.name!r}: the parent chain loops")
            seen.add(cur.name)
            cur = accounts[cur.parent]


def _check_users(spec: TenancySpec, accounts: dict[str, AccountSpec]) -> None:
    for u in spec.users:
        for name in u.accounts + ([u.default_account] if u.default_account else []):
            if name not in accounts:
                raise ValueError(f"user {u.name!r}: unknown account {name!r}")
        if u.default_account and u.default_account not in u.accounts:
            raise ValueError(f"user {u.name!r}: default account {u.default_account!r} is not among its accounts")
    if spec.default_account is not None and spec.default_account not in accounts:
        raise ValueError(f"default_account {spec.default_account!r} is not a defined account")


def _check_qos(spec: TenancySpec) -> None:
    qos = {q.name: q for q in spec.qos}
    if spec.default_qos not in qos:
        raise ValueError(f"default_qos {spec.default_qos!r} is not a defined qos")
    for q in spec.qos:
        for victim in q.preempts:
            if victim not in qos:
                raise ValueError(f"qos {q.name!r}: preempts unknown qos {victim!r}")
            if qos[victim].priority >= q.priority:
                raise ValueError(f"qos {q.name!r} preempts {victim!r}, whose priority is not lower")


def _check_queues(spec: TenancySpec, accounts: dict[str, AccountSpec]) -> None:
    claimed: dict[str, str] = {}
    for q in spec.queues:
        for r in list(q.nominal) + list(q.borrowing_limit) + list(q.lending_limit):
            if r not in ("gpu", "cpu", "mem_mib") and not (r.startswith("gpu:") and len(r) > 4):
                raise ValueError(f"queue {q.name!r}: unknown resource {r!r} (gpu, gpu:<model>, cpu, mem_mib)")
        for name in q.accounts:
            if name not in accounts:
                raise ValueError(f"queue {q.name!r}: unknown account {name!r}")
            if name in claimed:
                raise ValueError(f"account {name!r} is in queues {claimed[name]!r} and {q.name!r}")
            claimed[name] = q.name


def _unique(kind: str, names: list[str]) -> None:
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"duplicate {kind} name(s): {', '.join(dupes)}")


class ReservationSpec(_Strict):
    name: Name = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    start: EpochS
    end: EpochS
    nodes: Name | None = None  # hostlist; or
    gpus: Count | None = None  # a GPU count: the controller picks nodes
    users: Names = []
    accounts: Names = []
    maintenance: bool = False  # no jobs at all on these nodes in the window

    @model_validator(mode="after")
    def _shape(self) -> "ReservationSpec":
        if self.end <= self.start:
            raise ValueError("a reservation must end after it starts")
        if (self.nodes is None) == (self.gpus is None):
            raise ValueError("give exactly one of nodes or gpus")
        return self


class ReservationOut(ReservationSpec):
    model_config = ConfigDict(extra="forbid")
    node_names: list[str]
    active: bool


class PriorityOut(BaseModel):
    """One pending job's priority and its weighted factors (as sprio shows them)."""

    job_id: int
    user: str
    account: str
    partition: str
    qos: str
    priority: int
    age: int
    fairshare: int
    job_size: int
    partition_factor: int
    qos_factor: int
    nice: int
    array_job_id: int | None = None  # an array task's array, so that `sprio -j A_I` finds it
    array_task_id: int | None = None


class FairShareOut(BaseModel):
    account: str
    parent: str | None
    shares: int
    norm_shares: float
    raw_usage: float  # decayed billing-seconds
    norm_usage: float
    fairshare: float  # the factor in [0, 1]


class QueueOut(BaseModel):
    name: str
    cohort: str | None
    nominal: dict[str, int]
    usage: dict[str, int]
    borrowing: bool
    pending_jobs: int
    running_jobs: int
