# Sourced by benches/peers.sh and benches/overhead_ab.sh.
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
