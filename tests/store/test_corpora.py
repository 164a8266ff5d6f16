"""The corpora store and the S3 Vectors side of corpus search, on moto in-process."""

from __future__ import annotations

import boto3
import numpy as np
import pytest

from codeshot.routing.embedders import HashingEmbedder
from codeshot.runner.corpora import S3VectorsSearch
from codeshot.store.corpora import CorpusState, CorpusStore, VectorIndexes


def test_a_ready_version_replaces_older_ones_and_a_failed_one_does_not(aws):
    store = CorpusStore(aws)
    first = store.start("ann/docs", [{"urls": ["https://a.example/*"]}])
    store.finish(first.replace(state=CorpusState.READY, chunks=3, object_key="corpora/x"))
    failed = store.start("ann/docs", [{"urls": ["https://a.example/*"]}])
    store.finish(failed.replace(state=CorpusState.FAILED, errors=["e"] * 50))
    assert [v.state for v in store.recent("ann/docs")] == [CorpusState.FAILED,
                                                            CorpusState.READY]
    assert store.recent("ann/docs")[0].errors == ["e"] * 20  # capped
    assert store.newest_ready("ann/docs").version == first.version  # the failure kept it

    second = store.start("ann/docs", [{"urls": ["https://a.example/*"]}])
    store.finish(second.replace(state=CorpusState.READY, object_key="corpora/y"))
    assert [v.version for v in store.recent("ann/docs")] == [second.version]
    store.delete_agent("ann/docs")
    assert store.recent("ann/docs") == []


def test_an_outcome_too_large_to_store_is_stored_failed_not_left_ingesting(aws):
    store = CorpusStore(aws)
    version = store.start("ann/docs", [{"urls": ["https://a.example/*"]}])
    key = store.put_index("ann/docs", b'{"chunks": []}')
    huge = [{"urls": [f"https://a.example/{i}{'a' * 1000}" for i in range(500)]}]
    done = store.finish(version.replace(state=CorpusState.READY, corpora=huge, chunks=3,
                                        object_key=key))
    [stored] = store.recent("ann/docs")
    assert stored.state is done.state is CorpusState.FAILED
    assert stored.errors == ["the ingestion's outcome could not be stored"]
    assert store.newest_ready("ann/docs") is None
    assert corpus_objects(store) == set()  # the index it wrote, which no item names


def test_the_same_index_bytes_are_stored_once_per_agent(aws):
    store = CorpusStore(aws)
    key = store.put_index("ann/docs", b'{"chunks": []}')
    assert key == store.put_index("ann/docs", b'{"chunks": []}')
    assert store.read_index(key) == b'{"chunks": []}'
    # Another agent's same bytes are its own object: deleting one never takes the other's.
    assert store.put_index("bob/docs", b'{"chunks": []}') != key


def corpus_objects(store: CorpusStore) -> set[str]:
    listed = store.s3.list_objects_v2(Bucket=store.bucket, Prefix="corpora/")
    return {o["Key"] for o in listed.get("Contents", [])}


def ready(store: CorpusStore, agent_id: str, data: bytes, drop=None):
    version = store.start(agent_id, [{"urls": ["https://a.example/*"]}])
    return store.finish(version.replace(state=CorpusState.READY, chunks=1,
                                        object_key=store.put_index(agent_id, data)), drop)


def test_a_ready_version_deletes_the_indexes_it_replaces_but_not_its_own(aws):
    store = CorpusStore(aws)
    first = ready(store, "ann/docs", b"one")
    other = ready(store, "bob/docs", b"one")  # the same bytes, another agent's
    legacy = store.start("ann/docs", [])  # indexed when objects were shared (corpora/<sha>)
    store.s3.put_object(Bucket=store.bucket, Key="corpora/abc", Body=b"shared")
    store.finish(legacy.replace(state=CorpusState.READY, object_key="corpora/abc"))
    again = ready(store, "ann/docs", b"one")  # refreshed, unchanged: the same object
    assert corpus_objects(store) == {first.object_key, other.object_key, "corpora/abc"}
    assert again.object_key == first.object_key
    changed = ready(store, "ann/docs", b"two")
    assert corpus_objects(store) == {changed.object_key, other.object_key, "corpora/abc"}
    assert [v.version for v in store.recent("ann/docs")] == [changed.version]
    assert store.read_index(store.newest_ready("bob/docs").object_key) == b"one"


def test_deleting_an_agent_deletes_every_version_and_its_index_a_page_at_a_time(
        aws, monkeypatch):
    from codeshot.errors import Unavailable
    from codeshot.store import corpora

    store = CorpusStore(aws)
    kept = ready(store, "bob/docs", b"bob's")
    ready(store, "ann/docs", b"ann's")
    for _ in range(6):  # failures keep the versions before them: seven versions
        store.finish(store.start("ann/docs", []).replace(state=CorpusState.FAILED))
    assert len(store.recent("ann/docs")) == 7
    assert len(corpus_objects(store)) == 2
    monkeypatch.setattr(corpora, "DELETE_PAGE", 2)
    monkeypatch.setattr(corpora, "DELETE_PAGES", 2)
    with pytest.raises(Unavailable, match="send the same request again"):  # 4 of 7 per request
        store.delete_agent("ann/docs")
    assert len(store.recent("ann/docs")) == 3
    store.delete_agent("ann/docs")  # the same delete again goes on, and ends
    assert store.recent("ann/docs") == []
    assert corpus_objects(store) == {kept.object_key}  # only the other agent's is left
    store.delete_agent("ann/docs")  # nothing left: nothing to do


def test_deleting_an_agent_stops_within_its_time_and_goes_on_when_asked_again(
        aws, monkeypatch):
    """Each version may take an S3 Vectors call too: a thousand of them outlasted the
    API's 29 s."""
    from codeshot.errors import Unavailable
    from codeshot.store import corpora

    store = CorpusStore(aws)
    ready(store, "ann/docs", b"ann's")
    for _ in range(2):
        store.finish(store.start("ann/docs", []).replace(state=CorpusState.FAILED))
    monkeypatch.setattr(corpora, "DELETE_PAGE", 1)
    monkeypatch.setattr(corpora, "DELETE_SECONDS", 0.0)  # out of time after each page
    for left in (2, 1):
        with pytest.raises(Unavailable, match="send the same request again"):
            store.delete_agent("ann/docs")
        assert len(store.recent("ann/docs")) == left
    store.delete_agent("ann/docs")
    assert store.recent("ann/docs") == [] and corpus_objects(store) == set()


def test_a_ready_version_deletes_the_s3_vectors_indexes_it_replaces(aws):
    client = boto3.client("s3vectors", region_name=aws.region)
    client.create_vector_bucket(vectorBucketName=aws.corpus_vector_bucket)
    store = CorpusStore(aws)
    search = S3VectorsSearch(aws, store, HashingEmbedder(dim=16), client)
    chunks = [{"text": "passage", "url": "https://a.example/"}]

    def indexed(agent_id: str):
        version = store.start(agent_id, [])
        search.write(agent_id, version.version, chunks, np.eye(1, 16, dtype=np.float32))
        return store.finish(version.replace(state=CorpusState.READY, object_key=None),
                            search.drop)

    def indexes() -> set[str]:
        return {i["indexName"] for i in client.list_indexes(
            vectorBucketName=aws.corpus_vector_bucket)["indexes"]}

    first, other = indexed("ann/docs"), indexed("bob/docs")
    failed = store.start("ann/docs", [])  # failed before writing: no index to delete
    store.finish(failed.replace(state=CorpusState.FAILED))
    second = indexed("ann/docs")
    assert indexes() == {S3VectorsSearch.index_name("ann/docs", second.version),
                         S3VectorsSearch.index_name("bob/docs", other.version)}
    assert first.version not in {v.version for v in store.recent("ann/docs")}


def test_deleting_an_agent_deletes_its_s3_vectors_indexes(aws):
    """Its last ready version's index too, which no newer version ever replaces."""
    client = boto3.client("s3vectors", region_name=aws.region)
    client.create_vector_bucket(vectorBucketName=aws.corpus_vector_bucket)
    store, indexes = CorpusStore(aws), VectorIndexes(aws, client)
    search = S3VectorsSearch(aws, store, HashingEmbedder(dim=16), client)

    def indexed(agent_id: str) -> None:
        version = store.start(agent_id, [])
        search.write(agent_id, version.version, [{"text": "passage", "url": "https://a/"}],
                     np.eye(1, 16, dtype=np.float32))
        store.finish(version.replace(state=CorpusState.READY, object_key=None), search.drop)

    indexed("ann/docs")
    indexed("bob/docs")
    store.start("ann/docs", [])  # still ingesting: no index yet
    store.delete_agent("ann/docs", drop=indexes.drop)
    assert store.recent("ann/docs") == []
    assert [i["indexName"] for i in client.list_indexes(
        vectorBucketName=aws.corpus_vector_bucket)["indexes"]] == [
        VectorIndexes.index_name("bob/docs", store.recent("bob/docs")[0].version)]


def test_an_ingestion_whose_agent_is_deleted_while_it_runs_leaves_nothing(aws):
    """Its progress and its outcome used to be put back unconditionally: the deleted
    agent's version, object and index outlived it, searched by a new agent of its id."""
    client = boto3.client("s3vectors", region_name=aws.region)
    client.create_vector_bucket(vectorBucketName=aws.corpus_vector_bucket)
    store = CorpusStore(aws)
    search = S3VectorsSearch(aws, store, HashingEmbedder(dim=16), client)
    version = store.start("ann/docs", [])
    store.progress(version.replace(documents=3))
    store.delete_agent("ann/docs", drop=search.drop)  # meanwhile
    store.progress(version.replace(documents=6))
    key = store.put_index("ann/docs", b'{"chunks": []}')
    search.write("ann/docs", version.version, [{"text": "passage", "url": "https://a/"}],
                 np.eye(1, 16, dtype=np.float32))
    store.finish(version.replace(state=CorpusState.READY, object_key=key), search.drop)
    assert store.recent("ann/docs") == []
    assert corpus_objects(store) == set()
    assert client.list_indexes(vectorBucketName=aws.corpus_vector_bucket)["indexes"] == []


def test_a_forgotten_ingestion_keeps_the_object_a_running_one_of_the_id_may_name(aws):
    """The agent deleted and made again meanwhile, ingesting the same bytes: the object is
    named by content, and the new version names it only once it is done."""
    store = CorpusStore(aws)
    old = store.start("ann/docs", [])
    store.delete_agent("ann/docs")
    new = store.start("ann/docs", [])  # the new agent's, running
    key = store.put_index("ann/docs", b'{"chunks": []}')  # by both, the same bytes
    store.finish(old.replace(state=CorpusState.READY, object_key=key))
    assert corpus_objects(store) == {key}
    store.finish(new.replace(state=CorpusState.READY, object_key=key))
    assert store.read_index(store.newest_ready("ann/docs").object_key) == b'{"chunks": []}'


def test_an_ingestions_vectors_go_to_its_own_s3_vectors_index(aws):
    client = boto3.client("s3vectors", region_name=aws.region)
    client.create_vector_bucket(vectorBucketName=aws.corpus_vector_bucket)
    search = S3VectorsSearch(aws, CorpusStore(aws), HashingEmbedder(dim=16), client)
    chunks = [{"text": f"passage {i}", "url": f"https://a.example/{i}"} for i in range(3)]
    vectors = np.eye(3, 16, dtype=np.float32)
    search.write("ann/docs", "v#01ABC", chunks, vectors)
    name = S3VectorsSearch.index_name("ann/docs", "v#01ABC")
    index = client.get_index(vectorBucketName=aws.corpus_vector_bucket, indexName=name)["index"]
    assert (index["dimension"], index["distanceMetric"]) == (16, "cosine")
    got = client.get_vectors(vectorBucketName=aws.corpus_vector_bucket, indexName=name,
                             keys=["1"], returnMetadata=True, returnData=True)["vectors"][0]
    assert got["metadata"] == chunks[1] and got["data"]["float32"][1] == 1.0
