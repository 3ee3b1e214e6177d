"""The driver's JVM runs with streambed's options: C2's compile thresholds
(`spark_session.JIT_OPTIONS`) are the ones HotSpot applied, not its defaults."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from streambed.spark.session import JIT_OPTIONS
from tests.fixtures.spark import PANDAS_WARNING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings(PANDAS_WARNING)]


def test_the_driver_jvm_applies_the_c2_thresholds(spark: SparkSession) -> None:
    wanted = dict(option.removeprefix("-XX:").split("=") for option in JIT_OPTIONS.split())
    assert len(wanted) == 4
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    kind = jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(kind)
    applied = {name: bean.getVMOption(name).getValue() for name in wanted}
    assert applied == wanted
