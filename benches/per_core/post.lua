-- wrk script of benches/per_core.sh: a tiny non-streaming chat request.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"stub","messages":[{"role":"user","content":"Say ok."}],"max_tokens":1}'
