# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The FastAPI and prometheus-fastapi-instrumentator that constraints.txt pins serve vLLM's routes.

vLLM 0.22.1's OpenAI server instruments its app for /metrics with prometheus-fastapi-instrumentator and includes its
routes through `APIRouter`s. With fastapi 0.163.2 (the former pin) every request of that server failed on the H200
(`'_IncludedRouter' object has no attribute 'path'`). vLLM cannot run here; the same middleware over the same route
shape can: this test is what failed with the former pin and passes with fastapi 0.136.3.
"""

from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient
from prometheus_fastapi_instrumentator import Instrumentator

from llamafactory_agentic.rollout.server_launch import fastapi_breaks_vllm_server


def test_an_instrumented_app_serves_its_included_routes():
    router = APIRouter()

    @router.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": "policy"}]}

    app = FastAPI()
    app.include_router(router)
    Instrumentator(excluded_handlers=["/metrics"]).instrument(app).expose(app)
    with TestClient(app) as client:
        reply = client.get("/v1/models")
        assert reply.status_code == 200 and reply.json()["data"] == [{"id": "policy"}]
        assert 'handler="/v1/models"' in client.get("/metrics").text  # the middleware read the route
    assert fastapi_breaks_vllm_server() is None
