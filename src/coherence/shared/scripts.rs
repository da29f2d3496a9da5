//! The shared tier's Lua scripts: a URI's version (the highest of its upstream's floor and the
//! records of the URI and its parents), a look for a vouched entry (claiming the load when there
//! is none and no replica loads it), a fill kept only under the version and boot it began with,
//! a bump of one URI and a raise of an upstream's floor. Each runs as one atomic step on Redis.

use redis::Script;

/// The tier's Lua scripts, each one atomic step on Redis.
pub(super) struct Scripts {
    pub look: Script,
    pub fill: Script,
    pub bump: Script,
    pub raise: Script,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        let with_version = |body: &str, first: usize| {
            Script::new(&format!("{}{body}", VERSION_LUA.replace("FIRST", &first.to_string())))
        };
        Scripts {
            look: with_version(LOOK_LUA, 10),
            fill: with_version(FILL_LUA, 11),
            bump: Script::new(BUMP_LUA),
            raise: Script::new(RAISE_LUA),
        }
    }
}

/// The version of a URI: ARGV[first..] are the names of the URI and its parents. Defines `p`, `up`, `v`.
const VERSION_LUA: &str = r"
local p, up = ARGV[1], ARGV[2]
local v = tonumber(redis.call('GET', p .. 'floor:' .. up) or '0')
if #ARGV >= FIRST then
  local got = redis.call('HMGET', p .. 'rec:' .. up, unpack(ARGV, FIRST))
  for i = 1, #got do
    if got[i] then
      local x = tonumber(got[i])
      if x > v then v = x end
    end
  end
end
";

/// ARGV: prefix, upstream, offered boot, private who, uri's name, replica key prefix, the
/// loading key's who, this replica, claim px, parents' names… → {boot, version, found, lease}.
/// Nothing found: the load's claim is taken when no replica holds one (lease 2: this replica
/// holds it, now or left by a reader of its own), else lease 1 (another replica loads).
const LOOK_LUA: &str = r"
local boot = redis.call('GET', p .. 'boot')
if not boot then
  boot = ARGV[3]
  redis.call('SET', p .. 'boot', boot)
end
local found = 0
local whos = {'-', ARGV[4]}
for i = 1, 2 do
  local k = p .. 'e:' .. up .. ':' .. v .. ':' .. whos[i] .. ':' .. ARGV[5]
  local voucher = redis.call('HGET', k, 'v')
  if voucher then
    if voucher == '' or redis.call('EXISTS', ARGV[6] .. voucher) == 1 then
      found = i
      break
    end
    redis.call('DEL', k)
  end
end
if found > 0 then return {boot, v, found, 0} end
local lease = 0
for i = 1, 2 do
  local subscriber = redis.call('GET', p .. 'lease:' .. up .. ':' .. v .. ':' .. whos[i] .. ':' .. ARGV[5])
  if subscriber then
    if subscriber == ARGV[8] and whos[i] == ARGV[7] then
      if lease == 0 then lease = 2 end
    else
      lease = 1
    end
  end
end
if lease == 0 then
  redis.call('SET', p .. 'lease:' .. up .. ':' .. v .. ':' .. ARGV[7] .. ':' .. ARGV[5], ARGV[8], 'PX', ARGV[9])
  lease = 2
end
return {boot, v, found, lease}
";

/// ARGV: prefix, upstream, boot, version, who, uri's name, voucher, sealed body, px, the loading
/// key's who, parents' names… → 1 kept (and the load's claim let go of), 0 not.
const FILL_LUA: &str = r"
if redis.call('GET', p .. 'boot') ~= ARGV[3] or v ~= tonumber(ARGV[4]) then return 0 end
local k = p .. 'e:' .. up .. ':' .. v .. ':' .. ARGV[5] .. ':' .. ARGV[6]
redis.call('HSET', k, 'v', ARGV[7], 'b', ARGV[8])
redis.call('PEXPIRE', k, ARGV[9])
redis.call('DEL', p .. 'lease:' .. up .. ':' .. v .. ':' .. ARGV[10] .. ':' .. ARGV[6])
return 1
";

/// ARGV: prefix, upstream, uri's name, most records → the new version.
const BUMP_LUA: &str = r"
local p, up = ARGV[1], ARGV[2]
local n = redis.call('INCR', p .. 'ctr:' .. up)
if redis.call('HLEN', p .. 'rec:' .. up) >= tonumber(ARGV[4]) then
  redis.call('SET', p .. 'floor:' .. up, n)
  redis.call('DEL', p .. 'rec:' .. up)
  return n
end
redis.call('HSET', p .. 'rec:' .. up, ARGV[3], n)
return n
";

/// ARGV: prefix, upstream → the new floor.
const RAISE_LUA: &str = r"
local p, up = ARGV[1], ARGV[2]
local n = redis.call('INCR', p .. 'ctr:' .. up)
redis.call('SET', p .. 'floor:' .. up, n)
redis.call('DEL', p .. 'rec:' .. up)
return n
";
