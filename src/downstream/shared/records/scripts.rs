//! The Lua scripts that keep a session record and its indexes in one step each.

/// KEYS: record, all sessions, the principal's; ARGV: sealed principal, principal key, now, expiry,
/// record ttl, max total, max for the principal, the sorted sets' ttl.
pub(super) const ADMIT: &str = r"
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[3])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[6]) then return 1 end
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[7]) then return 2 end
redis.call('ZADD', KEYS[2], ARGV[4], KEYS[1])
redis.call('ZADD', KEYS[3], ARGV[4], KEYS[1])
redis.call('PEXPIRE', KEYS[2], ARGV[8])
redis.call('PEXPIRE', KEYS[3], ARGV[8])
redis.call('HSET', KEYS[1], 'principal', ARGV[1], 'pk', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 0
";

/// KEYS: record, its subscriptions, all sessions, the principals' prefix; ARGV: now, idle ttl,
/// subscribed ttl, the sorted sets' ttl. 1 when the record lives. The record's score moves to its
/// new expiry (it is entered again if its sets were lost), and both sets live at least as long
/// as it does.
pub(super) const TOUCH: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local ttl = ARGV[2]
if redis.call('HLEN', KEYS[2]) > 0 then ttl = ARGV[3] end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
local pk = redis.call('HGET', KEYS[1], 'pk')
if not pk then return 1 end
local expiry = tonumber(ARGV[1]) + tonumber(ttl)
redis.call('ZADD', KEYS[3], expiry, KEYS[1])
redis.call('ZADD', KEYS[4] .. pk, expiry, KEYS[1])
redis.call('PEXPIRE', KEYS[3], ARGV[4])
redis.call('PEXPIRE', KEYS[4] .. pk, ARGV[4])
return 1
";

/// KEYS: record, its subscriptions, the principal's live sessions, all sessions; ARGV: uri's
/// name, max, subscribed ttl, channel, news, max for the principal, now, sealed uri, the sorted
/// sets' ttl. The principal's URIs are those of its live sessions' records (at most
/// `server.max_sessions_per_principal` of them). The record now lives the subscribed ttl: its
/// score moves to that expiry, and both sets live at least as long.
pub(super) const SUBSCRIBE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
if redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[2]) then return -2 end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[7])
local held = 0
for _, record in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  held = held + redis.call('HLEN', record .. ':held')
end
if held >= tonumber(ARGV[6]) then return -3 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[8])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
local expiry = tonumber(ARGV[7]) + tonumber(ARGV[3])
redis.call('ZADD', KEYS[3], expiry, KEYS[1])
redis.call('ZADD', KEYS[4], expiry, KEYS[1])
redis.call('PEXPIRE', KEYS[3], ARGV[9])
redis.call('PEXPIRE', KEYS[4], ARGV[9])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
";

/// KEYS: record, its subscriptions, all sessions, the principals' prefix; ARGV: channel, news.
pub(super) const END: &str = r"
local pk = redis.call('HGET', KEYS[1], 'pk')
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], KEYS[1])
if pk then redis.call('ZREM', KEYS[4] .. pk, KEYS[1]) end
redis.call('PUBLISH', ARGV[1], ARGV[2])
return 1
";
