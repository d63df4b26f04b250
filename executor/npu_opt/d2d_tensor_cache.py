"""d2d_tensor_cache: task inputs reach the workers without being serialised through Ray one at a time.

verl 0.9's V1 trainer (trainer.use_v1, the default) keeps batches in TransferQueue and sends workers only
metadata; every worker fetches its own slice in parallel (trainer/main_ppo.py TaskRunnerV1.run turns
TransferQueue on). That removes the dispatch skew the recipes' TensorCache removed; it needs the
TransferQueue package.
"""

from __future__ import annotations

from executor.npu_opt.base import ApplyContext, Availability, Optimization
from executor.npu_opt.host import HostEnv, method_source


class D2dTensorCache(Optimization):
    id = "d2d_tensor_cache"
    mechanism = "native"

    def detect(self, host: HostEnv) -> Availability:
        tree = host.verl_source("trainer/main_ppo.py")
        run = (method_source(tree, "TaskRunnerV1", "run") if tree else None) or ""
        if "transfer_queue.enable = True" not in run:
            return self.availability(False, "installed verl's V1 trainer does not dispatch through TransferQueue")
        if not host.has("TransferQueue"):
            return self.availability(False, "unavailable: TransferQueue not installed (verl's V1 trainer "
                                     "dispatches task inputs through it)")
        return self.availability(True, f"verl V1 trainer dispatches through TransferQueue "
                                 f"{host.version('TransferQueue')}")

    def apply_config(self, ctx: ApplyContext) -> str:
        ctx.overrides.set("trainer.use_v1", True)
        return "trainer.use_v1=True (TransferQueue dispatch)"


OPTIMIZATION = D2dTensorCache()
