-- wrk script of benches/per_core.sh, workload `sse`: a streamed completion request (the
-- stub answers it with a fixed stream of token events).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"stub","prompt":"Say ok.","max_tokens":64,"stream":true}'
