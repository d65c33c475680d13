# ping.py RELAY_PORT COUNT: sends COUNT datagrams one at a time, prints RTTs in ms.
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2.0)
s.connect(("127.0.0.1", int(sys.argv[1])))
rtts = []; lost = 0
for i in range(int(sys.argv[2])):
    t = time.monotonic(); s.send(b"ping %d" % i)
    try:
        while s.recv(65535) != b"ping %d" % i: pass
        rtts.append((time.monotonic() - t) * 1000)
    except socket.timeout:
        lost += 1
rtts.sort()
print(f"sent {int(sys.argv[2])} lost {lost} rtt ms min {rtts[0]:.1f} median {rtts[len(rtts)//2]:.1f} max {rtts[-1]:.1f}")
