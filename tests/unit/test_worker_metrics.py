"""The worker's Prometheus registry: what the services record (EMF names and units) becomes
counters summed, gauges set, summaries counted, in base units, with labels escaped."""

from __future__ import annotations

from consolidator.worker.metrics import PrometheusRegistry, partition_labels


def test_counters_sum_gauges_keep_the_last_value_summaries_count_and_milliseconds_become_seconds():
    registry = PrometheusRegistry()
    for value in (3, 4):
        registry.add_metric(name="RecordsIngested", unit="Count", value=value)
    registry.add_metric(name="OldestPendingAge", unit="Milliseconds", value=90_000)
    registry.add_metric(name="OldestPendingAge", unit="Milliseconds", value=1_500)
    registry.add_metric(name="EventToPublishLatency", unit="Milliseconds", value=2_000)
    registry.add_metric(name="EventToPublishLatency", unit="Milliseconds", value=500)
    registry.add_metric(name="NotInTheCatalogue", unit="Count", value=1)
    text = registry.render()
    assert "consolidator_records_ingested_total 7\n" in text
    assert "# TYPE consolidator_records_ingested_total counter\n" in text
    assert "consolidator_oldest_pending_age_seconds 1.5\n" in text
    assert "consolidator_event_to_publish_latency_seconds_sum 2.5\n" in text
    assert "consolidator_event_to_publish_latency_seconds_count 2\n" in text
    assert "# TYPE consolidator_event_to_publish_latency_seconds histogram\n" in text
    buckets = {line.split()[0]: line.split()[1] for line in text.splitlines() if "_bucket{" in line}
    assert buckets['consolidator_event_to_publish_latency_seconds_bucket{le="1"}'] == "1"  # 0.5 s; cumulative
    assert buckets['consolidator_event_to_publish_latency_seconds_bucket{le="5"}'] == "2"  # and 2 s
    assert buckets['consolidator_event_to_publish_latency_seconds_bucket{le="+Inf"}'] == "2"
    assert "NotInTheCatalogue" not in text.lower() and "not_in_the_catalogue" not in text


def test_labelled_series_are_escaped_and_forgotten_with_their_partition():
    registry = PrometheusRegistry()
    odd = partition_labels('a"b\\c', 3)
    registry.set("PartitionLag", 12, odd)
    registry.set("PartitionLag", 0, partition_labels("orders", 0))
    assert 'consolidator_partition_lag{topic="a\\"b\\\\c",partition="3"} 12\n' in registry.render()
    registry.forget("PartitionLag", odd)
    assert 'a\\"b' not in registry.render() and 'partition="0"} 0' in registry.render()
