package svc

import (
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

func TestRedisOptions(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		common Common
		want   asynq.RedisConnOpt
	}{
		"one address": {
			common: Common{RedisAddr: "redis:6379", RedisDB: 3, RedisSentinel: RedisSentinel{Password: "pw"}},
			want:   asynq.RedisClientOpt{Addr: "redis:6379", DB: 3, Password: "pw"},
		},
		"sentinels replace the address": {
			common: Common{RedisAddr: "redis:6379", RedisDB: 2, RedisSentinel: RedisSentinel{
				Sentinels: []string{"s1:26379", " s2:26379", "", "s3:26379"}, Master: "capstan",
				SentinelPassword: "spw", Password: "pw"}},
			want: asynq.RedisFailoverClientOpt{MasterName: "capstan", SentinelAddrs: []string{"s1:26379", "s2:26379", "s3:26379"},
				SentinelPassword: "spw", Password: "pw", DB: 2},
		},
		"the master name defaults to mymaster": {
			common: Common{RedisSentinel: RedisSentinel{Sentinels: []string{"s1:26379"}}},
			want:   asynq.RedisFailoverClientOpt{MasterName: DefaultRedisMaster, SentinelAddrs: []string{"s1:26379"}},
		},
		"blank sentinels are one address": {
			common: Common{RedisAddr: "127.0.0.1:56379", RedisSentinel: RedisSentinel{Sentinels: []string{" ", ""}, Master: "capstan"}},
			want:   asynq.RedisClientOpt{Addr: "127.0.0.1:56379"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.common.Redis())
		})
	}
}
