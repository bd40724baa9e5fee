"""Sends exactly N tiny chat requests over C keep-alive connections, for budget.sh; with
WORKLOAD `sse`, streamed completions instead (the stub answers each with its token events).

    load.py HOST PORT N C [tiny|sse]
"""

import http.client
import sys
import threading

BODY = b'{"model":"stub","messages":[{"role":"user","content":"Say ok."}],"max_tokens":1}'
STREAM_BODY = b'{"model":"stub","prompt":"Say ok.","max_tokens":64,"stream":true}'


def main():
    host, port, total, connections = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    streamed = len(sys.argv) > 5 and sys.argv[5] == "sse"
    path, body = ("/v1/completions", STREAM_BODY) if streamed else ("/v1/chat/completions", BODY)
    failures = []

    def send(count):
        connection = http.client.HTTPConnection(host, port, timeout=60)
        for _ in range(count):
            connection.request("POST", path, body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                failures.append(response.status)

    threads = [threading.Thread(target=send, args=(total // connections,))
               for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        sys.exit(f"{len(failures)} of {total} requests failed: {failures[:5]}")


if __name__ == "__main__":
    main()
