"""The corpora store and the S3 Vectors side of corpus search, on moto in-process."""

from __future__ import annotations

import boto3
import numpy as np

from codeshot.routing.embedders import HashingEmbedder
from codeshot.runner.corpora import S3VectorsSearch
from codeshot.store.corpora import CorpusState, CorpusStore


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
    huge = [{"urls": [f"https://a.example/{i}{'a' * 1000}" for i in range(500)]}]
    done = store.finish(version.replace(state=CorpusState.READY, corpora=huge, chunks=3,
                                        object_key="corpora/x"))
    [stored] = store.recent("ann/docs")
    assert stored.state is done.state is CorpusState.FAILED
    assert stored.errors == ["the ingestion's outcome could not be stored"]
    assert store.newest_ready("ann/docs") is None


def test_the_same_index_bytes_are_stored_once(aws):
    store = CorpusStore(aws)
    assert store.put_index(b'{"chunks": []}') == store.put_index(b'{"chunks": []}')
    assert store.read_index(store.put_index(b'{"chunks": []}')) == b'{"chunks": []}'


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
