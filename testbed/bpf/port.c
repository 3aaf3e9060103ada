// SPDX-License-Identifier: GPL-2.0
/* Braid testbed switch port in eBPF (tc clsact ingress, cls_bpf direct action).
 *
 * Attached to the ingress of both wire-namespace ends of a link. A frame
 * arriving on one end is judged by the port rules of the direction it travels
 * (a virtual egress queue, see below) and bpf_redirect()ed to the egress of
 * the other end, where an HTB qdisc sends it at the port rate: control
 * (classid 1:10, prio 0) before data (1:20, prio 1).
 *
 * The virtual queue (one per port, in braid_queue, under a bpf_spin_lock)
 * keeps two "empties at" times in ns of bpf_ktime_get_ns(): the whole queue
 * and the control class. The data bytes queued are (all - max(ctrl, now)) *
 * rate. Like HTB's token bucket, an idle port banks up to `burst_ns` of
 * sending time (the times may lag `now` by that much), so the virtual queue
 * and HTB's real one stay equal instead of differing by HTB's burst.
 * Decisions follow testbed/element.py: control (DSCP CONTROL/TRIMMED/
 * TRIMMED_LAST_HOP, non-IP, ICMPv6) is never trimmed and has 64 KB headroom
 * above the buffer; a Braid DATA datagram arriving while the data queue holds
 * more than `trim` bytes is cut to its trim point (wire/SPEC.md) and re-marked
 * TRIMMED / TRIMMED_LAST_HOP; above `buffer` data is dropped; ECT data above
 * `ecn` bytes gets CE, and so does a random fraction `mark` of ECT data
 * (a marking fault). Trimming happens here at ingress, not at clsact
 * egress: there HTB would already have charged the full length.
 *
 * A second program (section "tc/gap") times departures where they are
 * visible after the shaper: at tc ingress of the far end of the link (the
 * node's veth, in the node's namespace), with the port's slot in the filter's
 * classid (1:slot+1; the program sees only its minor). For each frame it
 * records the gap since the link's previous departure into a histogram of
 * gap / ideal time of that previous frame at the port rate (braid_gap), but
 * only while the link was busy: when the port's virtual queue still held more
 * than that frame as it left.
 *
 * Everything is configured from Python through pinned maps (testbed/ebpf.py):
 * no reload for loss, mark, down, rate, thresholds. Build: testbed/bpf/build.sh.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define BRAID_UDP_PORT 4747
#define BRAID_VERSION 1
#define BRAID_TYPE_DATA 3
#define COMMON_HEADER_LEN 16
#define HEADER_TAG_LEN 16
#define HEADER_WORDS_OFFSET 3
#define DSCP_CONTROL 46
#define DSCP_TRIMMED 40
#define DSCP_TRIMMED_LAST_HOP 41
#define CTRL_HEADROOM (64 * 1024)
#define NO_THRESHOLD 0xffffffffu
#define MAX_PORTS 8192
/* A trimmed datagram keeps at most this many UDP bytes (8 + trim point). */
#define MAX_KEEP 1024
#define CLASS_CONTROL 0x00010010 /* HTB classid 1:10 */
#define CLASS_DATA 0x00010020    /* HTB classid 1:20 */

/* Port settings, keyed by the ingress ifindex (in the wire namespace). */
struct port_cfg {
	__u32 out_ifindex; /* the other end of the link: where frames leave */
	__u32 slot;        /* index into queue_map and counter_map */
	__u64 rate_bps;    /* 0: unshaped (no queue ever builds) */
	__u32 buffer;      /* bytes */
	__u32 trim;        /* bytes, NO_THRESHOLD: never */
	__u32 ecn;         /* bytes, NO_THRESHOLD: never */
	__u32 loss;        /* drop probability * 2^32 (saturating) */
	__u32 last_hop;
	__u32 down;
	__u32 burst_ns; /* HTB's burst at the port rate: how far it may run ahead */
	__u32 mark;     /* CE-mark probability * 2^32 for ECT data, whatever the queue */
};

struct port_queue {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 all_until;  /* ns: when the whole virtual queue is empty */
	__u64 ctrl_until; /* ns: when the control class is empty */
	__u64 max_depth;  /* bytes */
	/* Bytes the port accepted into its queue and bytes the far end saw
	 * leave it (atomic adds: the port and the far end take no common lock);
	 * their difference is the link's real backlog (``tc/gap``: lateness). */
	__u64 in_bytes;
	__u64 out_bytes;
	/* ns: when the ideal link would be empty: all_until without HTB's burst
	 * floor (the link never ahead of its rate); lateness is judged by it. */
	__u64 ideal_until;
};

/* Counters, per CPU (summed by the reader). Order = COUNTERS in ebpf.py. */
struct port_counters {
	__u64 rx;
	__u64 sent;
	__u64 trimmed;
	__u64 marked;
	__u64 dropped;
	__u64 lost;
	__u64 blackholed;
	__u64 tx_errors;
	__u64 not_trimmable;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct port_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} braid_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct port_queue);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} braid_queue SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct port_counters);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} braid_cnt SEC(".maps");

/* Departure gaps of a busy link, in 1/GAP_UNIT of the ideal frame time: buckets
 * 0..7 hold 0..7 units, then 8 per power of two (b = 8 * (e - 2) + next three
 * bits, e = floor(log2 units)), so a bucket is at most 12.5% wide; the last
 * bucket holds everything from 2^GAP_MAX_EXP units up. */
#define GAP_UNIT 32
#define GAP_MAX_EXP 26
#define GAP_BUCKETS (8 * (GAP_MAX_EXP - 2) + 8)
/* Lateness: how far the real link is behind the ideal one as a frame
 * leaves, (real backlog - ideal backlog) at the port rate, in units of
 * LATE_NS_UNIT ns. The ideal link sends at its rate and never ahead of it
 * (port_queue.ideal_until, no burst floor): HTB sending early (its burst)
 * reads 0, a shaper timer that fires late reads the time it lost. After
 * LATE_RESYNC_NS with the ideal link empty the byte counts restart level (a
 * frame lost between the port and the far end must not read as lateness
 * for ever). */
#define LATE_NS_UNIT 1000
#define LATE_RESYNC_NS 100000000ULL
struct port_gap {
	struct bpf_spin_lock lock;
	__u32 last_len;   /* bytes of the previous departure */
	__u64 last_ns;    /* when it arrived at the far end */
	__u64 last_busy;  /* the virtual queue held more than it as it left */
	__u64 gaps;       /* busy gaps recorded */
	__u64 max_units;  /* the largest of them */
	__u64 hist[GAP_BUCKETS];
	__u64 lates;      /* departures with a lateness recorded */
	__u64 late_max_ns;
	__u64 late_hist[GAP_BUCKETS]; /* lateness in ns / LATE_NS_UNIT, same buckets */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct port_gap);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} braid_gap SEC(".maps");

/* The port rate by slot, for the far end (which cannot look up braid_cfg). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} braid_gap_rate SEC(".maps");

/* Scratch space for the UDP checksum of a trimmed datagram. */
struct scratch {
	__u8 b[32 + 5 * 256 + 8]; /* addresses, then the UDP bytes in 256-byte steps */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} braid_scratch SEC(".maps");

static __always_inline int is_control_dscp(__u8 dscp)
{
	return dscp == DSCP_CONTROL || dscp == DSCP_TRIMMED || dscp == DSCP_TRIMMED_LAST_HOP;
}

static __always_inline __u64 bytes_to_ns(__u64 bytes, __u64 rate_bps)
{
	return rate_bps ? bytes * 8ULL * 1000000000ULL / rate_bps : 0;
}

static __always_inline __u64 ns_to_bytes(__u64 ns, __u64 rate_bps)
{
	/* ns * rate / 8e9 without overflow for ns < ~1 s at 100 Gbit/s */
	return rate_bps ? (ns * (rate_bps / 1000ULL)) / 8000000ULL : 0;
}

/* UDP checksum over pseudo header + the first `keep` UDP bytes (a multiple of 4,
 * <= MAX_KEEP) of the datagram at udp_off; addr_off/addr_len: source+destination
 * addresses (8 bytes for IPv4, 32 for IPv6). Returns the value to store, or -1. */
static __always_inline int udp_csum(struct __sk_buff *skb, __u32 addr_off, __u32 addr_len,
				    __u32 udp_off, __u32 keep)
{
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&braid_scratch, &zero);
	__s64 sum = 0;
	__u32 tot, i;

	if (!s || keep < 8 || keep > MAX_KEEP || (keep & 3))
		return -1;
	if (addr_len == 8) {
		if (bpf_skb_load_bytes(skb, addr_off, s->b, 8))
			return -1;
	} else {
		if (bpf_skb_load_bytes(skb, addr_off, s->b, 32))
			return -1;
		addr_len = 32;
	}
	if (bpf_skb_load_bytes(skb, udp_off, s->b + 32, keep))
		return -1;
	s->b[32 + 6] = 0;
	s->b[32 + 7] = 0;
	/* pseudo header rest: zero, protocol, length (same 16-bit sum as IPv6's) */
	*(__u32 *)(s->b + 32 + keep) = bpf_htonl((IPPROTO_UDP << 16) | keep);
	sum = bpf_csum_diff(0, 0, (__be32 *)s->b, addr_len, 0);
	if (sum < 0)
		return -1;
	tot = keep + 4;
#pragma unroll
	for (i = 0; i < 5; i++) {
		__u32 off = i * 256, n;

		if (off >= tot)
			break;
		n = tot - off;
		if (n > 256)
			n = 256;
		sum = bpf_csum_diff(0, 0, (__be32 *)(s->b + 32 + off), n, (__wsum)sum);
		if (sum < 0)
			return -1;
	}
	{
		__u32 c = (__u32)sum;

		c = (c & 0xffff) + (c >> 16);
		c = (c & 0xffff) + (c >> 16);
		c = ~c & 0xffff;
		return c ? c : 0xffff;
	}
}

/* Bytes a frame takes on the link: a GSO skb (a TCP or UDP batch that no
 * NIC segmented, or a GRO aggregate) leaves as gso_segs frames, each with
 * its own headers, and HTB charges them all (the kernel's qdisc_pkt_len_init):
 * so must the virtual queue, or HTB runs ~4% behind it on TCP. */
static __always_inline __u64 wire_len(struct __sk_buff *skb, __u32 len)
{
	__u32 segs = skb->gso_segs, hdr = sizeof(struct ethhdr), l4;
	__u8 b[2];
	__u16 proto;

	if (segs <= 1)
		return len;
	if (bpf_skb_load_bytes(skb, 12, &proto, 2))
		return len;
	if (proto == bpf_htons(ETH_P_IP)) {
		if (bpf_skb_load_bytes(skb, hdr, b, 1) || bpf_skb_load_bytes(skb, hdr + 9, b + 1, 1))
			return len;
		l4 = b[1];
		hdr += (b[0] & 0xf) * 4;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, hdr + 6, b + 1, 1))
			return len;
		l4 = b[1];
		hdr += 40;
	} else {
		return len;
	}
	if (l4 == IPPROTO_TCP) {
		if (bpf_skb_load_bytes(skb, hdr + 12, b, 1))
			return len;
		hdr += (b[0] >> 4) * 4;
	} else if (l4 == IPPROTO_UDP) {
		hdr += 8;
	} else {
		return len;
	}
	if (segs > 65535)
		segs = 65535;
	return (__u64)len + (__u64)(segs - 1) * hdr;
}

SEC("tc")
int braid_port(struct __sk_buff *skb)
{
	__u32 key = skb->ingress_ifindex;
	struct port_cfg *cfg = bpf_map_lookup_elem(&braid_cfg, &key);
	struct port_counters *cnt;
	struct port_queue *q;
	void *data, *data_end;
	struct ethhdr *eth;
	__u32 len = skb->len, l3 = sizeof(struct ethhdr), ihl = 0, slot;
	int control = 1, v6 = 0, braid = 0, ect = 0, trim = 0, want_trim = 0, mark = 0;
	__u32 cut = 0;
	__u64 now, floor, head, tx, depth_all, depth_data, wire;
	int resync;

	if (!cfg)
		return TC_ACT_OK; /* not one of ours */
	slot = cfg->slot;
	cnt = bpf_map_lookup_elem(&braid_cnt, &slot);
	q = bpf_map_lookup_elem(&braid_queue, &slot);
	if (!cnt || !q)
		return TC_ACT_SHOT;
	cnt->rx++;
	if (cfg->down) {
		cnt->blackholed++;
		return TC_ACT_SHOT;
	}
	if (cfg->loss && bpf_get_prandom_u32() < cfg->loss) {
		cnt->lost++;
		return TC_ACT_SHOT;
	}

	/* Classify: headers are pulled into the linear area first. */
	bpf_skb_pull_data(skb, len < 14 + 40 + 8 + 4 ? len : 14 + 40 + 8 + 4);
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		goto classified;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + l3;
		struct udphdr *udp;
		__u8 *payload;

		if ((void *)(ip + 1) > data_end)
			goto classified;
		control = is_control_dscp(ip->tos >> 2);
		ect = (ip->tos & 3) == 1 || (ip->tos & 3) == 2;
		ihl = ip->ihl * 4;
		if (ihl < 20 || ip->protocol != IPPROTO_UDP ||
		    (ip->frag_off & bpf_htons(0x3fff)))
			goto classified;
		/* options would move the UDP header out of the pulled area: re-pull */
		if (ihl != 20) {
			bpf_skb_pull_data(skb, l3 + ihl + 8 + 4 > len ? len : l3 + ihl + 8 + 4);
			data = (void *)(long)skb->data;
			data_end = (void *)(long)skb->data_end;
		}
		if (ihl > 60)
			goto classified;
		udp = data + l3 + ihl;
		payload = (void *)(udp + 1);
		if ((void *)(payload + 4) > data_end)
			goto classified;
		if (udp->dest != bpf_htons(BRAID_UDP_PORT))
			goto classified;
		if (payload[0] == BRAID_VERSION && payload[1] == BRAID_TYPE_DATA) {
			cut = payload[HEADER_WORDS_OFFSET] * 4 + HEADER_TAG_LEN;
			braid = cut >= COMMON_HEADER_LEN && l3 + ihl + 8 + cut < len;
		}
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + l3;
		struct udphdr *udp;
		__u8 *payload, tclass;

		if ((void *)(ip6 + 1) > data_end)
			goto classified;
		v6 = 1;
		ihl = 40;
		tclass = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
		control = ip6->nexthdr == IPPROTO_ICMPV6 || is_control_dscp(tclass >> 2);
		ect = (tclass & 3) == 1 || (tclass & 3) == 2;
		if (ip6->nexthdr != IPPROTO_UDP)
			goto classified;
		udp = (void *)(ip6 + 1);
		payload = (void *)(udp + 1);
		if ((void *)(payload + 4) > data_end)
			goto classified;
		if (udp->dest != bpf_htons(BRAID_UDP_PORT))
			goto classified;
		if (payload[0] == BRAID_VERSION && payload[1] == BRAID_TYPE_DATA) {
			cut = payload[HEADER_WORDS_OFFSET] * 4 + HEADER_TAG_LEN;
			braid = cut >= COMMON_HEADER_LEN && l3 + ihl + 8 + cut < len;
		}
	}
classified:

	wire = wire_len(skb, len); /* helpers may not run under the lock */
	now = bpf_ktime_get_ns(); /* before the lock */
	floor = now > cfg->burst_ns ? now - cfg->burst_ns : 0;
	bpf_spin_lock(&q->lock);
	resync = q->ideal_until + LATE_RESYNC_NS < now;
	if (q->all_until < floor)
		q->all_until = floor;
	if (q->ctrl_until < floor)
		q->ctrl_until = floor;
	head = q->ctrl_until > now ? q->ctrl_until : now;
	depth_all = q->all_until > now ? ns_to_bytes(q->all_until - now, cfg->rate_bps) : 0;
	depth_data = q->all_until > head ? ns_to_bytes(q->all_until - head, cfg->rate_bps) : 0;
	if (control) {
		if (depth_all + wire > (__u64)cfg->buffer + CTRL_HEADROOM) {
			bpf_spin_unlock(&q->lock);
			cnt->dropped++;
			return TC_ACT_SHOT;
		}
	} else if ((want_trim = cfg->trim != NO_THRESHOLD && depth_data + wire > cfg->trim &&
				braid) && 8 + cut <= MAX_KEEP) {
		trim = 1;
		len = l3 + ihl + 8 + cut;
		wire = len;
		control = 1;
	} else if (depth_data + wire > cfg->buffer) {
		bpf_spin_unlock(&q->lock);
		cnt->dropped++;
		return TC_ACT_SHOT;
	} else if (cfg->ecn != NO_THRESHOLD && depth_data > cfg->ecn && ect) {
		mark = 1;
	}
	tx = bytes_to_ns(wire, cfg->rate_bps);
	q->all_until += tx;
	q->ideal_until = (q->ideal_until > now ? q->ideal_until : now) + tx;
	if (control)
		q->ctrl_until += tx;
	depth_all = q->all_until > now ? ns_to_bytes(q->all_until - now, cfg->rate_bps) : 0;
	if (depth_all > q->max_depth)
		q->max_depth = depth_all;
	bpf_spin_unlock(&q->lock);
	if (resync)
		q->in_bytes = q->out_bytes; /* racy: a hint, see LATE_RESYNC_NS */
	__sync_fetch_and_add(&q->in_bytes, wire);

	if (want_trim && !trim)
		cnt->not_trimmable++; /* trim point beyond MAX_KEEP: queued whole */
	/* A marking fault: a fraction of ECT data gets CE as if the queue were
	 * deep (helpers may not run under the lock, so it is drawn here). */
	if (!control && !mark && ect && cfg->mark && bpf_get_prandom_u32() < cfg->mark)
		mark = 1;

	if (trim) {
		__u8 dscp = cfg->last_hop ? DSCP_TRIMMED_LAST_HOP : DSCP_TRIMMED;
		__u32 udp_off = l3 + ihl, keep = 8 + cut;
		__be16 ulen = bpf_htons(keep);
		int csum;

		if (bpf_skb_change_tail(skb, len, 0))
			goto tx_error;
		if (bpf_skb_store_bytes(skb, udp_off + 4, &ulen, 2, 0))
			goto tx_error;
		if (!v6) {
			__u16 old[2], new[2];
			__u8 tos;

			if (bpf_skb_load_bytes(skb, l3, old, 4))
				goto tx_error;
			tos = ((__u8 *)old)[1];
			tos = (dscp << 2) | (tos & 3);
			((__u8 *)new)[0] = ((__u8 *)old)[0];
			((__u8 *)new)[1] = tos;
			new[1] = bpf_htons(ihl + keep);
			if (bpf_l3_csum_replace(skb, l3 + 10, old[0], new[0], 2) ||
			    bpf_l3_csum_replace(skb, l3 + 10, old[1], new[1], 2) ||
			    bpf_skb_store_bytes(skb, l3, new, 4, 0))
				goto tx_error;
			csum = udp_csum(skb, l3 + 12, 8, udp_off, keep);
		} else {
			__u8 b[2];
			__be16 plen = ulen;
			__u8 tclass;

			if (bpf_skb_load_bytes(skb, l3, b, 2))
				goto tx_error;
			tclass = (dscp << 2) | ((b[1] >> 4) & 3);
			b[0] = 0x60 | (tclass >> 4);
			b[1] = ((tclass & 0xf) << 4) | (b[1] & 0xf);
			if (bpf_skb_store_bytes(skb, l3, b, 2, 0) ||
			    bpf_skb_store_bytes(skb, l3 + 4, &plen, 2, 0))
				goto tx_error;
			csum = udp_csum(skb, l3 + 8, 32, udp_off, keep);
		}
		if (csum < 0)
			goto tx_error;
		{
			__u16 c = (__u16)csum;

			if (bpf_skb_store_bytes(skb, udp_off + 6, &c, 2, 0))
				goto tx_error;
		}
		cnt->trimmed++;
	} else if (mark) {
		if (!v6) {
			__u16 old, new;

			if (bpf_skb_load_bytes(skb, l3, &old, 2))
				goto tx_error;
			new = old;
			((__u8 *)&new)[1] |= 3;
			if (bpf_l3_csum_replace(skb, l3 + 10, old, new, 2) ||
			    bpf_skb_store_bytes(skb, l3, &new, 2, 0))
				goto tx_error;
		} else {
			__u8 b1;

			if (bpf_skb_load_bytes(skb, l3 + 1, &b1, 1))
				goto tx_error;
			b1 |= 3 << 4;
			if (bpf_skb_store_bytes(skb, l3 + 1, &b1, 1, 0))
				goto tx_error;
		}
		cnt->marked++;
	}
	skb->priority = control ? CLASS_CONTROL : CLASS_DATA;
	cnt->sent++;
	return bpf_redirect(cfg->out_ifindex, 0);

tx_error:
	cnt->tx_errors++;
	return TC_ACT_SHOT;
}

static __always_inline __u32 gap_bucket(__u64 units)
{
	__u32 e = 0;
	__u64 v = units;

	if (units < 8)
		return (__u32)units;
	if (v >> 32) { v >>= 32; e += 32; }
	if (v >> 16) { v >>= 16; e += 16; }
	if (v >> 8) { v >>= 8; e += 8; }
	if (v >> 4) { v >>= 4; e += 4; }
	if (v >> 2) { v >>= 2; e += 2; }
	if (v >> 1) { e += 1; }
	if (e >= GAP_MAX_EXP)
		return GAP_BUCKETS - 1;
	return 8 * (e - 2) + ((units >> (e - 3)) & 7);
}

SEC("tc/gap")
int braid_gap_prog(struct __sk_buff *skb)
{
	__u32 cid = skb->tc_classid, slot, len = skb->len, b;
	struct port_gap *g;
	struct port_queue *q;
	__u64 *rate, now, ideal, gap, backlog_ns, prev_ns, prev_busy;
	__u64 in, out, real_ns, ideal_ns, late_ns;
	__u32 prev_len;

	/* the kernel keeps only the classid's minor (a u16 in qdisc_skb_cb) */
	if ((cid & 0xffff) == 0)
		return TC_ACT_OK;
	slot = (cid & 0xffff) - 1;
	g = bpf_map_lookup_elem(&braid_gap, &slot);
	q = bpf_map_lookup_elem(&braid_queue, &slot);
	rate = bpf_map_lookup_elem(&braid_gap_rate, &slot);
	if (!g || !q || !rate || !*rate)
		return TC_ACT_OK;
	len = (__u32)wire_len(skb, len); /* what the link carried (GSO: every frame) */
	now = bpf_ktime_get_ns();
	/* What the port still had to send after this frame (racy read: a hint). */
	backlog_ns = q->all_until > now ? q->all_until - now : 0;
	ideal = bytes_to_ns(len, *rate);
	/* Lateness: the link's real backlog (accepted - departed bytes) beyond
	 * the ideal link's, at the port rate (racy reads: a hint). */
	__sync_fetch_and_add(&q->out_bytes, len);
	in = q->in_bytes;
	out = q->out_bytes;
	real_ns = in > out ? bytes_to_ns(in - out, *rate) : 0;
	ideal_ns = q->ideal_until > now ? q->ideal_until - now : 0;
	late_ns = real_ns > ideal_ns ? real_ns - ideal_ns : 0;
	bpf_spin_lock(&g->lock);
	b = gap_bucket(late_ns / LATE_NS_UNIT);
	asm volatile("" : "+r"(b)); /* keep the bound check for the verifier */
	if (b < GAP_BUCKETS)
		g->late_hist[b]++;
	g->lates++;
	if (late_ns > g->late_max_ns)
		g->late_max_ns = late_ns;
	prev_ns = g->last_ns;
	prev_len = g->last_len;
	prev_busy = g->last_busy;
	g->last_ns = now;
	g->last_len = len;
	g->last_busy = backlog_ns > ideal;
	if (prev_busy && prev_ns && now > prev_ns) {
		__u64 prev_ideal = bytes_to_ns(prev_len, *rate);

		if (prev_ideal) {
			gap = (now - prev_ns) * GAP_UNIT / prev_ideal;
			b = gap_bucket(gap);
			if (b < GAP_BUCKETS)
				g->hist[b]++;
			g->gaps++;
			if (gap > g->max_units)
				g->max_units = gap;
		}
	}
	bpf_spin_unlock(&g->lock);
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
