# Sourced by benches/peers.sh, benches/overhead_ab.sh and benches/per_core*.

# free_port: a loopback port free at the time of asking.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# listening_url FILE: waits (at most 30 s) for the first stdout line
# `listening on http://HOST:PORT` that `laneway sim` and `laneway serve` print, and echoes the URL.
listening_url() {
    local file="$1" tries url
    for ((tries = 0; tries < 150; tries++)); do
        url="$(head -n1 "$file" 2>/dev/null | grep -o 'http://[0-9.:]*' || true)"
        if [[ -n "$url" ]]; then echo "$url"; return 0; fi
        sleep 0.2
    done
    echo "no listening line in $file" >&2
    return 1
}
