/* UDP blaster for `braid bench element`: sends fixed-size datagrams with
 * sendmmsg(2) as fast as it can (or for a number of seconds), to measure how
 * many packets a link element forwards. Compiled at bench time when a C
 * compiler exists; the benchmark falls back to Python senders otherwise.
 *   blast ADDR PORT SIZE SECONDS [SPORT]  ->  prints "sent N seconds S"
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	static char buf[9000];
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	struct sockaddr_in dst = {.sin_family = AF_INET}, src = {.sin_family = AF_INET};
	long sent = 0;
	double t0, seconds;
	int fd, i, size;

	if (argc < 5) {
		fprintf(stderr, "usage: blast ADDR PORT SIZE SECONDS [SPORT]\n");
		return 2;
	}
	size = atoi(argv[3]);
	seconds = atof(argv[4]);
	if (size < 1 || size > (int)sizeof(buf) || seconds <= 0 || seconds > 600 ||
	    inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1) {
		fprintf(stderr, "blast: bad arguments\n");
		return 2;
	}
	dst.sin_port = htons(atoi(argv[2]));
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0 || (argc > 5 && (src.sin_port = htons(atoi(argv[5])),
				    bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0))) {
		perror("blast");
		return 1;
	}
	memset(msgs, 0, sizeof(msgs));
	for (i = 0; i < BATCH; i++) {
		iov[i].iov_base = buf;
		iov[i].iov_len = size;
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
		msgs[i].msg_hdr.msg_name = &dst; /* unconnected: ICMP errors do not stop us */
		msgs[i].msg_hdr.msg_namelen = sizeof(dst);
	}
	t0 = now();
	while (now() - t0 < seconds) {
		int n = sendmmsg(fd, msgs, BATCH, 0);

		if (n > 0)
			sent += n;
	}
	printf("sent %ld seconds %.3f\n", sent, now() - t0);
	return 0;
}
