# Sourced by the service scripts: free_port LOW HIGH prints a free loopback
# TCP port in [LOW, HIGH]. Callers keep below 32768, the start of Linux's
# ephemeral range, so that no outgoing connection on the machine takes the
# port between the check and the server's bind. It checks by binding (with
# python3, when present), or else by failing to connect.
free_port() {
  local low=$1 high=$2 p
  for p in $(shuf -i "$low-$high" -n 200); do
    if command -v python3 >/dev/null 2>&1; then
      python3 -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.close()' "$p" 2>/dev/null \
        && { echo "$p"; return 0; }
    elif ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"; return 0
    fi
  done
  echo "no free port found in $low-$high" >&2
  return 1
}
