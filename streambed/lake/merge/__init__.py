"""Copy-on-write merge: a pure plan (`plan_merge`) and its Spark executor.

`streambed.lake.merge.plan` has no I/O and imports nothing heavy. The executor
(`streambed.spark.merger.SparkMerger`) and the session (`streambed.spark.session`)
import pyspark; import them from their modules.
"""

from streambed.lake.merge.plan import MergePlan, PlanFile, plan_merge

__all__ = ["MergePlan", "PlanFile", "plan_merge"]
