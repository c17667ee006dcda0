"""Planning a vtensor.torch.auto step: the measured step's log replayed on the sim under the C++
policy (`_vtensor.plan_step`), within the step's budget less what the log does not hold, scaled by
the sim's bytes per real byte; the plan made again from the kept log where a guided step's peak
passed the budget (Capuchin's feedback); and the lowest budget a plan holds, where none holds."""
import json
import os
import re
import tempfile
import time

from vtensor import _vtensor
from vtensor.torch._step_record import _storage_key


class _Planning:
    """AutoStep's planning (a mixin: the state is AutoStep's)."""

    def _make_plan(self, rec, s):
        traced = {_storage_key(c) for c in rec.constants.values()}
        held = sum(t.untyped_storage().nbytes() for t in self._at_start if _storage_key(t) not in traced)
        untraced = held + self._state_to_come()
        with open(self._log) as f:
            log = f.read()
        if self.log is not None:  # whole or not at all
            path = str(self.log) if not self.plans else f"{self.log}-{len(self.plans) + 1}"
            with open(path + ".tmp", "w") as f:
                f.write(log)
            os.replace(path + ".tmp", path)
        try:
            sim_budget = self._sim_budget(rec, s["plain_peak_bytes"] - held, untraced)
        except ValueError as e:  # the runtime cannot read the log (an op it does not know)
            return self._passive_plan(rec, s, e, log)
        if sim_budget <= 0:
            raise ValueError(f"budget {_vtensor.format_bytes(self.budget)} leaves nothing for the step beside the "
                             f"{_vtensor.format_bytes(untraced)} it does not touch (optimizer state)")
        t = time.perf_counter()
        r = self._solve(self._log, sim_budget, untraced)
        info = {"policy": self.policy, "summary": r["summary"], "ops": r["num_ops"], "moves": len(r["moves"]),
                "predicted_ms": r["iteration_ms"][-1], "predicted_peak_bytes": r["peak_bytes"][-1] + untraced,
                "sim_budget_bytes": sim_budget, "untraced_bytes": untraced, "sim_bytes_per_real_byte": self._sim_ratio,
                "planning_s": time.perf_counter() - t, "link_gbps": self.link_gbps, "planned_from": s["step"],
                "corrections": 0}
        self.plans[self._key] = {"moves": self._moves_of(r), "ops": list(rec.op_names), "made": list(rec.made),
                                 "info": info, "report": r["report"], "log": log}
        s["plan"] = dict(info)

    def _passive_plan(self, rec, s, err, log):
        """A log the runtime cannot read: no moves planned, so that guided steps offload passively
        (least recently used saved tensors to host where the next op would pass the budget), and
        the reason names the op at the line the reader stopped at."""
        msg = str(err)
        m = re.search(r"line (\d+)", msg)
        lines = log.splitlines()
        op = None
        if m and 0 < int(m.group(1)) <= len(lines):
            try:
                op = json.loads(lines[int(m.group(1)) - 1]).get("NAME")
            except ValueError:
                op = None
        where = f"at op {op!r}" if op else "in its log"
        reason = (f"the step could not be planned {where} ({msg}); guided steps offload passively, least recently "
                  f"used first")
        info = {"policy": "passive", "summary": reason, "ops": rec.ops, "moves": 0, "predicted_ms": None,
                "predicted_peak_bytes": None, "sim_budget_bytes": None, "untraced_bytes": 0,
                "sim_bytes_per_real_byte": None, "planning_s": 0.0, "link_gbps": self.link_gbps,
                "planned_from": s["step"], "corrections": 0}
        self.plans[self._key] = {"moves": {}, "ops": list(rec.op_names), "made": list(rec.made), "info": info,
                                 "report": None, "log": log}
        s["plan"] = dict(info)
        s["reason"] = reason

    @staticmethod
    def _moves_of(r):
        moves = {}
        for point, kind, name, _planned in r["moves"]:
            moves.setdefault(point, []).append((kind, name))
        return moves

    def _solve(self, log_path, sim_budget, untraced):
        """The C++ policy's plan of the log within `sim_budget`; an OutOfMemoryError naming the
        lowest budget a plan holds where none holds this one."""
        spec = {"name": "torch-step", "base": self.gpu, "h2d_gbps": self.link_gbps, "d2h_gbps": self.link_gbps,
                "link_efficiency": 1}
        fd, gpu_file = tempfile.mkstemp(prefix="vtensor-gpu-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(spec, f)
        try:
            return _vtensor.plan_step(log_path, sim_budget, self.policy, "torch-step", gpu_file, 3, self.options)
        except _vtensor.OutOfMemoryError as e:
            lowest = int(self._lowest_budget(log_path, gpu_file, sim_budget) / min(self._sim_ratio, 1.0)) + untraced + 1
            err = _vtensor.OutOfMemoryError(
                f"vtensor auto: no plan holds this step in a budget of {_vtensor.format_bytes(self.budget)}: what "
                f"the hooks cannot move (tensors autograd does not save, and each op's own working set) needs "
                f"more; the lowest budget a plan held in the sim is about {_vtensor.format_bytes(lowest)} "
                f"({lowest} bytes). The planner said: {e}")
            err.lowest_budget = lowest  # bytes
            raise err from None
        finally:
            os.remove(gpu_file)

    def _correct(self, s):
        """Feedback (Capuchin's, on the peak): a guided step whose measured peak passed the budget has
        its plan made again for a sim budget lowered by the overshoot, at most three times."""
        plan = self._plan
        info = plan["info"]
        if s["peak_bytes"] <= self.budget:
            return
        if info["policy"] == "passive":
            s["reason"] = (f"the peak passed the budget by {_vtensor.format_bytes(s['peak_bytes'] - self.budget)} "
                           f"under passive offload: {info['summary']}")
            return
        if info["corrections"] >= 3:
            s["reason"] = (f"the peak passed the budget by {_vtensor.format_bytes(s['peak_bytes'] - self.budget)} "
                           f"after {info['corrections']} corrections of the plan: what the hooks cannot move needs more")
            return
        u = info["untraced_bytes"]
        sim_budget = int(info["sim_budget_bytes"] * (self.budget - u) / max(s["peak_bytes"] - u, 1) * 0.995)
        fd, path = tempfile.mkstemp(prefix="vtensor-step-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(plan["log"])
        try:
            r = self._solve(path, sim_budget, u)
        except _vtensor.OutOfMemoryError as e:
            s["reason"] = (f"the peak passed the budget by {_vtensor.format_bytes(s['peak_bytes'] - self.budget)}; no "
                           f"tighter plan: {e}")
            info["corrections"] = 3
            return
        finally:
            os.remove(path)
        plan["moves"] = self._moves_of(r)
        info.update(corrections=info["corrections"] + 1, sim_budget_bytes=sim_budget, moves=len(r["moves"]),
                    predicted_ms=r["iteration_ms"][-1], predicted_peak_bytes=r["peak_bytes"][-1] + u,
                    summary=r["summary"])
        s["replanned"] = dict(info)

    def _sim_budget(self, rec, real_peak, untraced):
        """The budget for the sim's replay of the log: the step's less what it does not touch
        (`untraced`), scaled by the sim's bytes per real byte of what the log holds at the measured
        step's peak (`real_peak`: malloc's own overhead and the like are real bytes no log line
        has), never above the step's less untraced."""
        plain = self.budget - untraced - self.slack
        fd, gpu_file = tempfile.mkstemp(prefix="vtensor-gpu-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"name": "torch-step", "base": self.gpu}, f)
        try:
            sim_peak = _vtensor.plan_step(self._log, 1 << 50, "none", "torch-step", gpu_file, 2, {})["peak_bytes"][-1]
        finally:
            os.remove(gpu_file)
        self._sim_ratio = sim_peak / max(real_peak, 1)
        return min(plain, int(plain * self._sim_ratio))

    def _lowest_budget(self, log_path, gpu_file, start):
        """The smallest sim budget the passive policy (lru: any movable tensor out on demand) holds the
        measured step in, by bisection from `start` (which did not) up to the unmanaged peak."""
        hi = _vtensor.plan_step(log_path, 1 << 50, "none", "torch-step", gpu_file, 2, {})["peak_bytes"][-1]
        lo = start
        while hi - lo > max(hi // 200, 4096):
            mid = (lo + hi) // 2
            try:
                _vtensor.plan_step(log_path, mid, "lru", "torch-step", gpu_file, 2, {})
                hi = mid
            except _vtensor.OutOfMemoryError:
                lo = mid
        return hi

    def plan_text(self):
        """Each plan, one move a line: the op boundary, the move, the tensor (the log's names)."""
        if not self.plans:
            return "no plan yet: the first step is measured"
        lines = []
        for plan in self.plans.values():
            i = plan["info"]
            lines.append(f"plan by {i['policy']} from step {i['planned_from']}: {i['moves']} moves over {i['ops']} ops, "
                         f"predicted {i['predicted_ms']:.2f} ms a step, peak {_vtensor.format_bytes(i['predicted_peak_bytes'])}")
            for point in sorted(plan["moves"]):
                for kind, name in plan["moves"][point]:
                    lines.append(f"  before op {point:5d}: {kind:9s} {name}")
        return "\n".join(lines)

