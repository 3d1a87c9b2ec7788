"""The table formats' parsers alone: which Iceberg metadata file is current and which snapshot is
meant; a Delta log's newest complete checkpoint and the commits after it, replayed; deletion-vector
paths as the Delta protocol names them."""

from __future__ import annotations

import pytest

from gateway.errors import S3Error
from gateway.tables import delta, iceberg
from gateway.tables.paths import resolve, split_location
from tests.tables.writers import (delta_add, delta_checkpoint, delta_commit, delta_remove, iceberg_metadata,
                                  manifest, manifest_list)


def commit(version: int) -> str:
    return f"{version:020d}.json"


def test_the_highest_version_is_the_current_metadata_file():
    names = ["v1.metadata.json", "v12.metadata.json", "v9.metadata.json", "version-hint.text", "snap-1.avro"]
    assert iceberg.current_metadata(names) == "v12.metadata.json"
    assert iceberg.current_metadata(["00002-b.metadata.json", "00010-a.metadata.json.gz", "00003-c.metadata.json"]) \
        == "00010-a.metadata.json.gz"
    assert iceberg.current_metadata(["m1.avro", "x.metadata.json"]) is None


def test_a_snapshot_by_id_the_current_one_or_none():
    metadata = iceberg.parse_metadata(iceberg_metadata("s3://b/t", {1: "s3://b/l1", 2: "s3://b/l2"}, 2), "m")
    assert iceberg.snapshot(metadata, None, "m")["manifest-list"] == "s3://b/l2"  # type: ignore[index]
    assert iceberg.snapshot(metadata, 1, "m")["manifest-list"] == "s3://b/l1"  # type: ignore[index]
    with pytest.raises(S3Error, match="snapshot 3 is not in m"):
        iceberg.snapshot(metadata, 3, "m")
    empty = iceberg.parse_metadata(iceberg_metadata("s3://b/t", {}, None), "m")
    assert iceberg.snapshot(empty, None, "m") is None


def test_manifests_give_live_files_and_garbage_is_a_clear_error():
    assert iceberg.manifest_list(manifest_list(["s3://b/m1.avro", "s3://b/m2.avro"]), "l") == \
        ["s3://b/m1.avro", "s3://b/m2.avro"]
    entries = iceberg.manifest_entries(manifest([(1, "s3://b/a", 10, "2026-12-01", 0), (2, "s3://b/gone", 5, None, 0),
                                                 (0, "s3://b/d", 3, None, 1)]), "m")
    assert [(path, size) for path, size, _ in entries] == [("s3://b/a", 10), ("s3://b/d", 3)]
    assert str(entries[0][2]["dt"]) == "2026-12-01"
    for parse in (iceberg.manifest_list, iceberg.manifest_entries):
        with pytest.raises(S3Error, match="not an Iceberg manifest"):
            parse(b"not avro at all", "x")  # type: ignore[operator]
    with pytest.raises(S3Error, match="not an Iceberg table metadata file"):
        iceberg.parse_metadata(b"{}", "x")


def test_the_newest_complete_checkpoint_and_the_commits_after_it():
    names = [commit(v) for v in range(8)] + [f"{4:020d}.checkpoint.parquet", "_last_checkpoint",
                                              f"{6:020d}.checkpoint.0000000001.0000000002.parquet"]  # 6: a part missing
    log = delta.Log(names)
    assert (log.version, log.checkpoint_version) == (7, 4)
    assert log.checkpoint == [f"{4:020d}.checkpoint.parquet"] and log.commits == [commit(5), commit(6), commit(7)]
    names.append(f"{6:020d}.checkpoint.0000000002.0000000002.parquet")
    assert delta.Log(names).checkpoint_version == 6 and delta.Log(names).commits == [commit(7)]
    older = delta.Log(names, version=5)
    assert (older.checkpoint_version, older.commits) == (4, [commit(5)])
    assert delta.Log([commit(0), commit(1)]).commits == [commit(0), commit(1)]


def test_a_log_that_cannot_be_read_says_why():
    with pytest.raises(S3Error, match="lacks commit 1"):
        delta.Log([commit(0), commit(2)])
    with pytest.raises(S3Error, match="not a Delta table"):
        delta.Log(["_last_checkpoint"])
    with pytest.raises(S3Error, match="version 9 is not in"):
        delta.Log([commit(0)], version=9)
    with pytest.raises(S3Error) as v2:
        delta.Log([commit(0), commit(1), f"{1:020d}.checkpoint.3a0d65cd-4056-49b8-937b-95f9e3ee90e5.json"])
    assert v2.value.code == "NotImplemented"


def test_replay_keeps_what_was_added_last_and_not_removed():
    replay = delta.Replay()
    replay.checkpoint(delta_checkpoint([delta_add("day=1/a.parquet", 10, "1"), delta_add("day=2/b.parquet", 20, "2")]),
                      "cp")
    replay.commit(delta_commit({"commitInfo": {}}, delta_remove("day=1/a.parquet"),
                               delta_add("day=2/c%20d.parquet", 30, "2")), "c1")
    dv = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 1, "sizeInBytes": 40,
          "cardinality": 2}
    replay.commit(delta_commit(delta_remove("day=2/b.parquet"), delta_add("day=2/b.parquet", 20, "2", dv)), "c2")
    live = {path: (size, values, vectors) for path, size, values, vectors in replay.live()}
    assert live == {"day=2/b.parquet": (20, {"day": "2"}, ["ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"]),
                    "day=2/c%20d.parquet": (30, {"day": "2"}, [])}
    with pytest.raises(S3Error, match="not a Delta commit"):
        replay.commit(b"{not json\n", "c3")
    with pytest.raises(S3Error, match="not a Delta checkpoint"):
        replay.checkpoint(b"PAR1 but not really", "cp2")


def test_locations_and_relative_paths():
    assert split_location("s3a://bkt/a/b.parquet") == ("bkt", "a/b.parquet")
    assert resolve("bkt", "t/", "day=2/c%20d.parquet", escaped=True) == ("bkt", "t/day=2/c d.parquet")
    assert resolve("bkt", "t/", "s3://other/x.parquet") == ("other", "x.parquet")
    with pytest.raises(S3Error, match="not an s3:// location"):
        split_location("hdfs://nn/t/a.parquet")


def test_a_manifest_without_the_fields_of_one_is_a_key_error_the_plan_turns_into_a_clear_line():
    from tests.tables.writers import avro

    odd = avro({"type": "record", "name": "odd", "fields": [{"name": "status", "type": "int"}]}, [{"status": 1}])
    with pytest.raises(KeyError):  # gateway.admin.tableplan.plan_table answers InvalidRequest for it
        iceberg.manifest_entries(odd, "m")
