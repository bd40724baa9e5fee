"""Sends exactly N tiny chat requests over C keep-alive connections, for budget.sh.

    load.py HOST PORT N C
"""

import http.client
import sys
import threading

BODY = b'{"model":"stub","messages":[{"role":"user","content":"Say ok."}],"max_tokens":1}'


def main():
    host, port, total, connections = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    failures = []

    def send(count):
        connection = http.client.HTTPConnection(host, port, timeout=60)
        for _ in range(count):
            connection.request("POST", "/v1/chat/completions", BODY,
                               {"Content-Type": "application/json"})
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
