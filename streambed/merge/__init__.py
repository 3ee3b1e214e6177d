"""Copy-on-write merge: a pure plan (`plan_merge`) and its Spark executor.

`streambed.merge.plan` has no I/O and imports nothing heavy. The executor
(`streambed.merge.executor.SparkMerger`) and the session (`streambed.merge.spark_session`)
import pyspark; import them from their modules.
"""

from streambed.merge.plan import MergePlan, PlanFile, plan_merge

__all__ = ["MergePlan", "PlanFile", "plan_merge"]
