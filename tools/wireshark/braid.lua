-- Wireshark dissector for Braid wire format v1 (UDP port 4747).
--
-- Usage:  wireshark -X lua_script:tools/wireshark/braid.lua capture.pcap
--         tshark -X lua_script:tools/wireshark/braid.lua -r capture.pcap -Y braid.trimmed==\"fabric\"
-- or copy this file to ~/.local/lib/wireshark/plugins/.
--
-- The layout follows wire/packets.py (the code is the truth): a 16-byte common
-- header, a type-specific body, a 16-byte header tag, then (DATA only) the
-- payload. A DATA packet whose header announces payload bytes but which ends
-- right after its tag was trimmed by a switch; the IP DSCP tells where
-- (40: in the fabric, 41: at the last hop). Field names match the Python
-- decoder: braid.type, braid.psn, braid.ev, braid.plane, braid.trimmed, ...
--
-- Decryption: set the preference "Key log file" (braid.keylog) to a key log
-- written by `braid daemon --keylog FILE` (lines "BRAID_DCID_KEYS dcid
-- header-key payload-key"). Every packet whose dcid is in the log then has its
-- header tag verified (AES-GMAC) and, for DATA, its payload decrypted and its
-- AEAD tag checked (AES-256-GCM), without the handshake in the capture:
-- braid.auth ("ok", "fail:tag", "fail:payload-tag", "nokey") and braid.plaintext.
--   tshark -X lua_script:braid.lua -o braid.keylog:keys.log -r p1.pcap -Y 'braid.auth == "ok"'

local braid = Proto("braid", "Braid multipath transport")

local PORT = 4747
local HEADER_TAG_LEN = 16
local PAYLOAD_TAG_LEN = 16

local types = {
    [1] = "INIT", [2] = "ACCEPT", [3] = "DATA", [4] = "SACK", [5] = "NACK",
    [6] = "PROBE", [7] = "PROBE_ACK", [8] = "CLOSE", [9] = "RESET", [10] = "UNKNOWN_CONN",
}
-- v1 header length in words (common header + body, tag excluded) per type
local header_words = { [1] = 12, [2] = 16, [3] = 13, [4] = 13, [5] = 9, [6] = 9, [7] = 9,
                       [8] = 6, [9] = 6, [10] = 7 }
local nack_reasons = {
    [1] = "TRIMMED", [2] = "TRIMMED_LAST_HOP", [3] = "OUT_OF_WINDOW", [4] = "NO_BUFFER",
    [5] = "NO_RESOURCE", [6] = "NO_BITMAP", [7] = "CLOSING", [8] = "UNEXPECTED",
}
local close_reasons = {
    [0] = "NORMAL", [1] = "IDLE", [2] = "RETRY_BUDGET", [3] = "PROTOCOL_ERROR",
    [4] = "SHUTDOWN", [5] = "AUTH_FAILED",
}
local dscp_names = { [10] = "DATA", [12] = "RETX", [46] = "CONTROL", [40] = "TRIMMED",
                     [41] = "TRIMMED_LAST_HOP" }

local f = braid.fields
f.version = ProtoField.uint8("braid.version", "Version")
f.type = ProtoField.uint8("braid.type", "Type", base.DEC, types)
f.flags = ProtoField.uint8("braid.flags", "Flags", base.HEX)
f.flag_retx = ProtoField.bool("braid.flags.retx", "RETX (retransmission)", 8, nil, 0x01)
f.flag_ack_req = ProtoField.bool("braid.flags.ack_req", "ACK_REQ", 8, nil, 0x02)
f.flag_last = ProtoField.bool("braid.flags.last", "LAST (end of message)", 8, nil, 0x04)
f.flag_ecn_echo = ProtoField.bool("braid.flags.ecn_echo", "ECN_ECHO", 8, nil, 0x08)
f.flag_plaintext = ProtoField.bool("braid.flags.plaintext", "PLAINTEXT (insecure)", 8, nil, 0x80)
f.header_words = ProtoField.uint8("braid.header_words", "Header length (words)")
f.dcid = ProtoField.uint32("braid.dcid", "Destination connection id", base.HEX)
f.epoch = ProtoField.uint16("braid.epoch", "Key epoch")
f.counter = ProtoField.uint64("braid.counter", "Packet counter (48 bits)")
f.psn = ProtoField.uint32("braid.psn", "PSN")
f.ev = ProtoField.uint32("braid.ev", "EV")
f.plane = ProtoField.uint8("braid.plane", "Plane")
f.reserved = ProtoField.bytes("braid.reserved", "Reserved")
f.payload_len = ProtoField.uint16("braid.payload_len", "Payload length")
f.msg_id = ProtoField.uint32("braid.msg_id", "Message id")
f.msg_offset = ProtoField.uint64("braid.msg_offset", "Message offset")
f.msg_len = ProtoField.uint64("braid.msg_len", "Message length")
f.timestamp = ProtoField.uint32("braid.timestamp", "Timestamp")
f.cum_psn = ProtoField.uint32("braid.cum_psn", "Cumulative PSN")
f.bitmap_base = ProtoField.uint32("braid.bitmap_base", "Bitmap base PSN")
f.bitmap = ProtoField.uint64("braid.bitmap", "SACK bitmap", base.HEX)
f.ack_psn = ProtoField.uint32("braid.ack_psn", "Acknowledged PSN (trigger)")
f.echo_ev = ProtoField.uint32("braid.echo_ev", "Echoed EV")
f.echo_ts = ProtoField.uint32("braid.echo_ts", "Echoed timestamp")
f.rwnd = ProtoField.uint32("braid.rwnd", "Receive window")
f.ce_count = ProtoField.uint16("braid.ce_count", "CE count")
f.ack_delay = ProtoField.uint8("braid.ack_delay", "ACK delay (8 us units)")
f.nack_reason = ProtoField.uint8("braid.nack_reason", "NACK reason", base.DEC, nack_reasons)
f.probe_id = ProtoField.uint32("braid.probe_id", "Probe id")
f.src_cid = ProtoField.uint32("braid.src_cid", "Source connection id", base.HEX)
f.nonce = ProtoField.bytes("braid.nonce", "Nonce")
f.echo_nonce = ProtoField.bytes("braid.echo_nonce", "Echoed nonce")
f.planes = ProtoField.uint8("braid.planes", "Planes")
f.evs = ProtoField.uint16("braid.evs", "EVs")
f.mtu = ProtoField.uint16("braid.mtu", "MTU")
f.close_reason = ProtoField.uint16("braid.close_reason", "Close reason", base.DEC, close_reasons)
f.final_psn = ProtoField.uint32("braid.final_psn", "Final PSN")
f.unknown_cid = ProtoField.uint32("braid.unknown_cid", "Unknown connection id", base.HEX)
f.echo_counter = ProtoField.uint64("braid.echo_counter", "Echoed counter")
f.ext = ProtoField.bytes("braid.ext", "Header extension")
f.tag = ProtoField.bytes("braid.tag", "Header tag")
f.payload = ProtoField.bytes("braid.payload", "Payload")
f.trimmed = ProtoField.string("braid.trimmed", "Trimmed")
f.auth = ProtoField.string("braid.auth", "Authentication (key log)")
f.plaintext = ProtoField.bytes("braid.plaintext", "Decrypted payload")

braid.prefs.keylog = Pref.string("Key log file", "",
    "File written by 'braid daemon --keylog FILE': decrypts packets of any plane")

-- AES-256 (encryption direction only: GCM needs no other) and GHASH, on 32-bit
-- words with bit32. Written from FIPS-197 and NIST SP 800-38D.
local band, bor, bxor = bit32.band, bit32.bor, bit32.bxor
local lshift, rshift = bit32.lshift, bit32.rshift

local SBOX, T0, T1, T2, T3 = {}, {}, {}, {}, {}
do
    local function rotl8(x, n) return band(bor(lshift(x, n), rshift(x, 8 - n)), 0xFF) end
    local p, q = 1, 1
    repeat  -- walk the multiplicative group with generator 3; q = p^-1
        p = band(bxor(p, lshift(p, 1), band(p, 0x80) ~= 0 and 0x1B or 0), 0xFF)
        q = bxor(q, lshift(q, 1)); q = bxor(q, lshift(q, 2)); q = bxor(q, lshift(q, 4))
        q = band(q, 0xFF)
        if band(q, 0x80) ~= 0 then q = bxor(q, 0x09) end
        SBOX[p] = bxor(q, rotl8(q, 1), rotl8(q, 2), rotl8(q, 3), rotl8(q, 4), 0x63)
    until p == 1
    SBOX[0] = 0x63
    for x = 0, 255 do
        local s = SBOX[x]
        local s2 = band(bxor(lshift(s, 1), band(s, 0x80) ~= 0 and 0x1B or 0), 0xFF)
        local s3 = bxor(s2, s)
        local w = bor(lshift(s2, 24), lshift(s, 16), lshift(s, 8), s3)
        T0[x] = w
        T1[x] = bor(rshift(w, 8), lshift(band(w, 0xFF), 24))
        T2[x] = bor(rshift(w, 16), lshift(band(w, 0xFFFF), 16))
        T3[x] = bor(rshift(w, 24), lshift(band(w, 0xFFFFFF), 8))
    end
end

local function word(s, i)  -- big-endian 32-bit word at 1-based byte index i
    local a, b, c, d = s:byte(i, i + 3)
    return bor(lshift(a, 24), lshift(b, 16), lshift(c, 8), d)
end

local function expand_key(key)  -- 32-byte string -> 60 round-key words
    local rk = {}
    for i = 0, 7 do rk[i] = word(key, 4 * i + 1) end
    local rcon = 1
    for i = 8, 59 do
        local t = rk[i - 1]
        if i % 8 == 0 then
            t = bxor(bor(lshift(SBOX[band(rshift(t, 16), 0xFF)], 24),
                         lshift(SBOX[band(rshift(t, 8), 0xFF)], 16),
                         lshift(SBOX[band(t, 0xFF)], 8), SBOX[rshift(t, 24)]),
                     lshift(rcon, 24))
            rcon = band(bxor(lshift(rcon, 1), band(rcon, 0x80) ~= 0 and 0x1B or 0), 0xFF)
        elseif i % 8 == 4 then
            t = bor(lshift(SBOX[rshift(t, 24)], 24), lshift(SBOX[band(rshift(t, 16), 0xFF)], 16),
                    lshift(SBOX[band(rshift(t, 8), 0xFF)], 8), SBOX[band(t, 0xFF)])
        end
        rk[i] = bxor(rk[i - 8], t)
    end
    return rk
end

local function encrypt(rk, a, b, c, d)  -- one block as four words -> four words
    a, b, c, d = bxor(a, rk[0]), bxor(b, rk[1]), bxor(c, rk[2]), bxor(d, rk[3])
    for r = 1, 13 do
        local k = 4 * r
        a, b, c, d =
            bxor(T0[rshift(a, 24)], T1[band(rshift(b, 16), 0xFF)], T2[band(rshift(c, 8), 0xFF)],
                 T3[band(d, 0xFF)], rk[k]),
            bxor(T0[rshift(b, 24)], T1[band(rshift(c, 16), 0xFF)], T2[band(rshift(d, 8), 0xFF)],
                 T3[band(a, 0xFF)], rk[k + 1]),
            bxor(T0[rshift(c, 24)], T1[band(rshift(d, 16), 0xFF)], T2[band(rshift(a, 8), 0xFF)],
                 T3[band(b, 0xFF)], rk[k + 2]),
            bxor(T0[rshift(d, 24)], T1[band(rshift(a, 16), 0xFF)], T2[band(rshift(b, 8), 0xFF)],
                 T3[band(c, 0xFF)], rk[k + 3])
    end
    local function last(w0, w1, w2, w3, k)
        return bxor(bor(lshift(SBOX[rshift(w0, 24)], 24), lshift(SBOX[band(rshift(w1, 16), 0xFF)], 16),
                        lshift(SBOX[band(rshift(w2, 8), 0xFF)], 8), SBOX[band(w3, 0xFF)]), k)
    end
    return last(a, b, c, d, rk[56]), last(b, c, d, a, rk[57]), last(c, d, a, b, rk[58]),
        last(d, a, b, c, rk[59])
end

-- X * H in GF(2^128), GCM bit order, four bits at a time (Shoup's table
-- method): 16 multiples of H and a reduction constant per shifted-out nibble.
local LAST4 = { [0] = 0x0000, 0x1c20, 0x3840, 0x2460, 0x7080, 0x6ca0, 0x48c0, 0x54e0,
                0xe100, 0xfd20, 0xd940, 0xc560, 0x9180, 0x8da0, 0xa9c0, 0xb5e0 }

local function htable(h)  -- M[i] = i * H with M[8] = H (GCM bit order)
    local m = { [0] = { 0, 0, 0, 0 } }
    local v0, v1, v2, v3 = h[1], h[2], h[3], h[4]
    m[8] = { v0, v1, v2, v3 }
    for _, i in ipairs({ 4, 2, 1 }) do  -- each is the previous times x: a right shift
        local lsb = band(v3, 1)
        v3 = bor(rshift(v3, 1), lshift(band(v2, 1), 31))
        v2 = bor(rshift(v2, 1), lshift(band(v1, 1), 31))
        v1 = bor(rshift(v1, 1), lshift(band(v0, 1), 31))
        v0 = rshift(v0, 1)
        if lsb == 1 then v0 = bxor(v0, 0xE1000000) end
        m[i] = { v0, v1, v2, v3 }
    end
    for _, i in ipairs({ 3, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15 }) do
        local hi = i >= 8 and 8 or (i >= 4 and 4 or 2)
        local a, b = m[hi], m[i - hi]
        m[i] = { bxor(a[1], b[1]), bxor(a[2], b[2]), bxor(a[3], b[3]), bxor(a[4], b[4]) }
    end
    return m
end

local function gmul4(x0, x1, x2, x3, m)
    local xs = { x0, x1, x2, x3 }
    local z0, z1, z2, z3 = 0, 0, 0, 0
    local first = true
    for w = 4, 1, -1 do
        local x = xs[w]
        for sh = 0, 24, 8 do  -- bytes from the last one; low nibble, then high
            local byte = band(rshift(x, sh), 0xFF)
            for _, nib in ipairs({ band(byte, 0xF), rshift(byte, 4) }) do
                if first then
                    first = false
                else
                    local rem = band(z3, 0xF)
                    z3 = bor(rshift(z3, 4), lshift(band(z2, 0xF), 28))
                    z2 = bor(rshift(z2, 4), lshift(band(z1, 0xF), 28))
                    z1 = bor(rshift(z1, 4), lshift(band(z0, 0xF), 28))
                    z0 = bxor(rshift(z0, 4), lshift(LAST4[rem], 16))
                end
                local e = m[nib]
                z0, z1, z2, z3 = bxor(z0, e[1]), bxor(z1, e[2]), bxor(z2, e[3]), bxor(z3, e[4])
            end
        end
    end
    return z0, z1, z2, z3
end

local function ghash(h, aad, ct)  -- -> four words
    local y0, y1, y2, y3 = 0, 0, 0, 0
    for _, s in ipairs({ aad, ct }) do
        local n = #s
        local padded = s .. string.rep("\0", (16 - n % 16) % 16)
        for i = 1, #padded, 16 do
            y0, y1, y2, y3 = gmul4(bxor(y0, word(padded, i)), bxor(y1, word(padded, i + 4)),
                                   bxor(y2, word(padded, i + 8)), bxor(y3, word(padded, i + 12)),
                                   h.m)
        end
    end
    local abits, cbits = #aad * 8, #ct * 8
    return gmul4(y0, bxor(y1, abits), y2, bxor(y3, cbits), h.m)
end

local function pack_words(...)
    local out = {}
    for i, w in ipairs({ ... }) do
        out[i] = string.char(rshift(w, 24), band(rshift(w, 16), 0xFF), band(rshift(w, 8), 0xFF),
                             band(w, 0xFF))
    end
    return table.concat(out)
end

local function gcm_key(key)  -- expanded key and H = E(K, 0)
    local rk = expand_key(key)
    local h0, h1, h2, h3 = encrypt(rk, 0, 0, 0, 0)
    local h = { h0, h1, h2, h3 }
    h.m = htable(h)
    return { rk = rk, h = h }
end

-- The tag of GCM(key, nonce (12 bytes), aad, ciphertext).
local function gcm_tag(k, nonce, aad, ct)
    local n0, n1, n2 = word(nonce, 1), word(nonce, 5), word(nonce, 9)
    local e0, e1, e2, e3 = encrypt(k.rk, n0, n1, n2, 1)
    local g0, g1, g2, g3 = ghash(k.h, aad, ct)
    return pack_words(bxor(e0, g0), bxor(e1, g1), bxor(e2, g2), bxor(e3, g3))
end

local function gcm_ctr(k, nonce, ct)  -- CTR part of GCM: plaintext of ct
    local n0, n1, n2 = word(nonce, 1), word(nonce, 5), word(nonce, 9)
    local out = {}
    local ctr = 2
    for i = 1, #ct, 16 do
        local ks = pack_words(encrypt(k.rk, n0, n1, n2, ctr))
        local chunk = ct:sub(i, i + 15)
        local b = {}
        for j = 1, #chunk do b[j] = string.char(bxor(chunk:byte(j), ks:byte(j))) end
        out[#out + 1] = table.concat(b)
        ctr = ctr + 1
    end
    return table.concat(out)
end

-- Key log: dcid -> list of { header = gcm key, payload = gcm key }, loaded on demand.
local keylog = { path = nil, keys = {} }

local function unhex(h)
    return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end))
end

local function keys_for(dcid)
    local path = braid.prefs.keylog
    if path == nil or path == "" then return nil end
    if keylog.path ~= path then
        keylog.path, keylog.keys = path, {}
        local fh = io.open(path, "r")
        if fh ~= nil then
            for line in fh:lines() do
                local cid, hk, pk = line:match("^BRAID_DCID_KEYS%s+(%d+)%s+(%x+)%s+(%x+)%s*$")
                if cid ~= nil and #hk == 64 and #pk == 64 then
                    local list = keylog.keys[tonumber(cid)] or {}
                    list[#list + 1] = { hk = unhex(hk), pk = unhex(pk) }
                    keylog.keys[tonumber(cid)] = list
                end
            end
            fh:close()
        end
    end
    return keylog.keys[dcid]
end

-- "ok" / "fail:tag" / "fail:payload-tag" / "nokey", and the plaintext (DATA).
local function authenticate(raw, hlen, ptype, dcid)
    local list = keys_for(dcid)
    -- INIT/ACCEPT are sealed with the cluster key's handshake key, not a traffic key
    if list == nil or ptype == 1 or ptype == 2 then return "nokey", nil end
    local header, tag = raw:sub(1, hlen), raw:sub(hlen + 1, hlen + HEADER_TAG_LEN)
    local nonce = "\0\0\0\0" .. raw:sub(9, 16)  -- 0 | epoch | counter
    for i = #list, 1, -1 do  -- newest first: an id may recur
        local e = list[i]
        e.hkey = e.hkey or gcm_key(e.hk)
        if gcm_tag(e.hkey, nonce, header, "") == tag then
            local rest = #raw - hlen - HEADER_TAG_LEN
            if ptype ~= 3 or rest < PAYLOAD_TAG_LEN then return "ok", nil end
            e.pkey = e.pkey or gcm_key(e.pk)
            local aad = raw:sub(1, hlen + HEADER_TAG_LEN)
            local ct = raw:sub(hlen + HEADER_TAG_LEN + 1, #raw - PAYLOAD_TAG_LEN)
            if gcm_tag(e.pkey, nonce, aad, ct) ~= raw:sub(#raw - PAYLOAD_TAG_LEN + 1) then
                return "fail:payload-tag", nil
            end
            return "ok", gcm_ctr(e.pkey, nonce, ct)
        end
    end
    return "fail:tag", nil
end

local ef = braid.experts
ef.trimmed = ProtoExpert.new("braid.trimmed.expert", "Payload trimmed by a switch",
                             expert.group.SEQUENCE, expert.severity.NOTE)
ef.malformed = ProtoExpert.new("braid.malformed", "Not a Braid v1 packet",
                               expert.group.MALFORMED, expert.severity.ERROR)

local ip_dscp = Field.new("ip.dsfield.dscp")
local ipv6_dscp = Field.new("ipv6.tclass.dscp")

local function current_dscp()
    local v = ip_dscp()
    if v == nil then v = ipv6_dscp() end
    if v == nil then return nil end
    return v.value
end

local function flag_names(flags)
    local names = {}
    local bits = { { 0x01, "RETX" }, { 0x02, "ACK_REQ" }, { 0x04, "LAST" },
                   { 0x08, "ECN_ECHO" }, { 0x80, "PLAINTEXT" } }
    for _, b in ipairs(bits) do
        if bit.band(flags, b[1]) ~= 0 then names[#names + 1] = b[2] end
    end
    if #names == 0 then return "-" end
    return table.concat(names, "|")
end

-- Body dissectors: add fields at offset 16 and return a summary for the Info column.
local body = {}

body[3] = function(tvb, t, words)  -- DATA
    local o = 16
    t:add(f.psn, tvb(o, 4)); t:add(f.ev, tvb(o + 4, 4)); t:add(f.plane, tvb(o + 8, 1))
    t:add(f.reserved, tvb(o + 9, 1)); t:add(f.payload_len, tvb(o + 10, 2))
    t:add(f.msg_id, tvb(o + 12, 4)); t:add(f.msg_offset, tvb(o + 16, 8))
    t:add(f.msg_len, tvb(o + 24, 8)); t:add(f.timestamp, tvb(o + 32, 4))
    return string.format("psn=%d ev=%d plane=%d msg=%d@%s/%s len=%d", tvb(o, 4):uint(),
        tvb(o + 4, 4):uint(), tvb(o + 8, 1):uint(), tvb(o + 12, 4):uint(),
        tostring(tvb(o + 16, 8):uint64()), tostring(tvb(o + 24, 8):uint64()),
        tvb(o + 10, 2):uint())
end

body[4] = function(tvb, t)  -- SACK
    local o = 16
    t:add(f.cum_psn, tvb(o, 4)); t:add(f.bitmap_base, tvb(o + 4, 4))
    t:add(f.bitmap, tvb(o + 8, 8)); t:add(f.ack_psn, tvb(o + 16, 4))
    t:add(f.echo_ev, tvb(o + 20, 4)); t:add(f.echo_ts, tvb(o + 24, 4))
    t:add(f.rwnd, tvb(o + 28, 4)); t:add(f.ce_count, tvb(o + 32, 2))
    t:add(f.plane, tvb(o + 34, 1)); t:add(f.ack_delay, tvb(o + 35, 1))
    return string.format("cum=%d ack_psn=%d echo_ev=%d plane=%d", tvb(o, 4):uint(),
        tvb(o + 16, 4):uint(), tvb(o + 20, 4):uint(), tvb(o + 34, 1):uint())
end

body[5] = function(tvb, t)  -- NACK
    local o = 16
    t:add(f.psn, tvb(o, 4)); t:add(f.echo_ev, tvb(o + 4, 4)); t:add(f.cum_psn, tvb(o + 8, 4))
    t:add(f.echo_ts, tvb(o + 12, 4)); t:add(f.nack_reason, tvb(o + 16, 1))
    t:add(f.plane, tvb(o + 17, 1)); t:add(f.reserved, tvb(o + 18, 2))
    local r = tvb(o + 16, 1):uint()
    return string.format("psn=%d reason=%s echo_ev=%d plane=%d", tvb(o, 4):uint(),
        nack_reasons[r] or ("UNKNOWN_" .. r), tvb(o + 4, 4):uint(), tvb(o + 17, 1):uint())
end

local function probe(tvb, t)  -- PROBE and PROBE_ACK
    local o = 16
    t:add(f.probe_id, tvb(o, 4)); t:add(f.ev, tvb(o + 4, 4)); t:add(f.psn, tvb(o + 8, 4))
    t:add(f.timestamp, tvb(o + 12, 4)); t:add(f.plane, tvb(o + 16, 1))
    t:add(f.reserved, tvb(o + 17, 3))
    return string.format("id=%d psn=%d ev=%d plane=%d", tvb(o, 4):uint(), tvb(o + 8, 4):uint(),
        tvb(o + 4, 4):uint(), tvb(o + 16, 1):uint())
end
body[6] = probe
body[7] = probe

local function handshake(tvb, t, accept)
    local o = 16
    t:add(f.src_cid, tvb(o, 4)); t:add(f.nonce, tvb(o + 4, 16))
    local p = o + 20
    if accept then t:add(f.echo_nonce, tvb(p, 16)); p = p + 16 end
    t:add(f.planes, tvb(p, 1)); t:add(f.reserved, tvb(p + 1, 1)); t:add(f.evs, tvb(p + 2, 2))
    t:add(f.mtu, tvb(p + 4, 2)); t:add(f.reserved, tvb(p + 6, 2))
    t:add(f.timestamp, tvb(p + 8, 4))
    return string.format("scid=0x%x planes=%d evs=%d mtu=%d", tvb(o, 4):uint(),
        tvb(p, 1):uint(), tvb(p + 2, 2):uint(), tvb(p + 4, 2):uint())
end
body[1] = function(tvb, t) return handshake(tvb, t, false) end
body[2] = function(tvb, t) return handshake(tvb, t, true) end

local function close(tvb, t)  -- CLOSE and RESET
    local o = 16
    t:add(f.close_reason, tvb(o, 2)); t:add(f.reserved, tvb(o + 2, 2))
    t:add(f.final_psn, tvb(o + 4, 4))
    local r = tvb(o, 2):uint()
    return string.format("reason=%s final_psn=%d", close_reasons[r] or ("UNKNOWN_" .. r),
        tvb(o + 4, 4):uint())
end
body[8] = close
body[9] = close

body[10] = function(tvb, t)  -- UNKNOWN_CONN: a restarted host lost this connection
    local o = 16
    t:add(f.unknown_cid, tvb(o, 4)); t:add(f.reserved, tvb(o + 4, 2))
    t:add(f.echo_counter, tvb(o + 6, 6))
    return string.format("unknown_cid=0x%x echo_counter=%s", tvb(o, 4):uint(),
        tostring(tvb(o + 6, 6):uint64()))
end

function braid.dissector(tvb, pinfo, tree)
    local n = tvb:len()
    if n < 16 then return 0 end
    pinfo.cols.protocol = "Braid"
    local t = tree:add(braid, tvb(), "Braid")
    local ver, ptype, words = tvb(0, 1):uint(), tvb(1, 1):uint(), tvb(3, 1):uint()
    t:add(f.version, tvb(0, 1))
    local min_words = header_words[ptype]
    if ver ~= 1 or min_words == nil or words < min_words or words > 64
            or n < words * 4 + HEADER_TAG_LEN then
        t:add_proto_expert_info(ef.malformed)
        pinfo.cols.info = "Braid MALFORMED"
        return n
    end
    t:add(f.type, tvb(1, 1))
    local flags = tvb(2, 1):uint()
    local ft = t:add(f.flags, tvb(2, 1))
    ft:append_text(" (" .. flag_names(flags) .. ")")
    ft:add(f.flag_retx, tvb(2, 1)); ft:add(f.flag_ack_req, tvb(2, 1))
    ft:add(f.flag_last, tvb(2, 1)); ft:add(f.flag_ecn_echo, tvb(2, 1))
    ft:add(f.flag_plaintext, tvb(2, 1))
    t:add(f.header_words, tvb(3, 1))
    t:add(f.dcid, tvb(4, 4))
    t:add(f.epoch, tvb(8, 2))
    t:add(f.counter, tvb(10, 6), UInt64(tvb(12, 4):uint(), tvb(10, 2):uint()))
    local summary = body[ptype](tvb, t, words)
    local hlen = words * 4
    local std = min_words * 4
    if hlen > std then t:add(f.ext, tvb(std, hlen - std)) end
    t:add(f.tag, tvb(hlen, HEADER_TAG_LEN))
    local rest = n - hlen - HEADER_TAG_LEN
    local trimmed = "no"
    if ptype == 3 then
        local plen = tvb(26, 2):uint()
        if rest == 0 and plen > 0 then
            local dscp = current_dscp()
            if dscp == 40 then trimmed = "fabric"
            elseif dscp == 41 then trimmed = "last-hop"
            else trimmed = "yes" end
        elseif rest > 0 then
            t:add(f.payload, tvb(hlen + HEADER_TAG_LEN, rest))
        end
    elseif rest > 0 then
        t:add(f.payload, tvb(hlen + HEADER_TAG_LEN, rest))
    end
    local tr = t:add(f.trimmed, trimmed)
    tr:set_generated()
    local auth = nil
    if braid.prefs.keylog ~= "" and bit.band(flags, 0x80) == 0 then
        local plain
        auth, plain = authenticate(tvb:raw(0, n), hlen, ptype, tvb(4, 4):uint())
        t:add(f.auth, auth):set_generated()
        if plain ~= nil and #plain > 0 then
            local ptvb = ByteArray.new(plain, true):tvb("Decrypted payload")
            t:add(f.plaintext, ptvb()):set_generated()
        end
    end
    if trimmed ~= "no" then
        tr:add_proto_expert_info(ef.trimmed, "Payload trimmed (" .. trimmed .. ")")
    end
    local name = types[ptype]
    t:append_text(", " .. name .. " " .. summary)
    local info = name .. " " .. summary .. " flags=" .. flag_names(flags)
    if trimmed ~= "no" then info = info .. " [TRIMMED " .. trimmed .. "]" end
    local dscp = current_dscp()
    if dscp ~= nil and dscp_names[dscp] then info = info .. " dscp=" .. dscp_names[dscp] end
    if auth ~= nil then info = info .. " auth=" .. auth end
    pinfo.cols.info = info
    return n
end

DissectorTable.get("udp.port"):add(PORT, braid)

