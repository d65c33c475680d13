# blast.py RELAY_PORT OFFER_MBPS SECONDS: sends 1200-byte datagrams at OFFER_MBPS for SECONDS,
# prints how many came back and the rate of the echoes (first to last arrival).
import socket, sys, time
port, offer, secs = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("127.0.0.1", port)); s.setblocking(False)
size = 1200; gap = size * 8 / (offer * 1e6)
sent = got = 0; first = last = None; start = time.monotonic(); nxt = start
def drain():
    global got, first, last
    while True:
        try: s.recv(65535)
        except BlockingIOError: return
        now = time.monotonic(); got += 1; first = first or now; last = now
while time.monotonic() - start < secs:
    if time.monotonic() >= nxt:
        s.send(b"x" * size); sent += 1; nxt += gap
    drain()
end = time.monotonic() + 2.0
while time.monotonic() < end: drain()
rate = (got - 1) * size * 8 / (last - first) / 1e6
print(f"offered {offer} Mb/s for {secs} s: sent {sent}, echoed {got}, echo rate {rate:.2f} Mb/s")
