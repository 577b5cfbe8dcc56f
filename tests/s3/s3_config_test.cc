// SPDX-License-Identifier: Apache-2.0
// dlfeed::s3's pure parts: URLs, key encoding, where credentials and the
// endpoint come from (environment, AWS profile files, a credential_process,
// run for real), listing XML. The
// requests themselves are tested against a real server (tests/python/s3).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "dlfeed/io/object_store.h"
#include "s3/client.h"
#include "s3/config.h"
#include "s3/credential_process.h"

namespace dlfeed::s3::detail {
namespace {

// Sets the AWS variables a test names and clears the others, restoring all at the end.
class Env {
 public:
  Env() {
    for (const char* n : kNames) {
      if (const char* v = std::getenv(n)) saved_.emplace_back(n, v);
      ::unsetenv(n);
    }
  }
  ~Env() {
    for (const char* n : kNames) ::unsetenv(n);
    for (auto& [n, v] : saved_) ::setenv(n.c_str(), v.c_str(), 1);
  }
  void set(const char* n, const std::string& v) { ::setenv(n, v.c_str(), 1); }

 private:
  static constexpr const char* kNames[] = {
      "AWS_ACCESS_KEY_ID",           "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",    "AWS_REGION",
      "AWS_DEFAULT_REGION",          "AWS_ENDPOINT_URL",      "AWS_ENDPOINT_URL_S3",  "AWS_PROFILE",
      "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",       "DLFEED_S3_ADDRESSING", "HOME"};
  std::vector<std::pair<std::string, std::string>> saved_;
};

std::string write_file(const std::string& name, const std::string& text) {
  const std::filesystem::path dir = std::filesystem::path(DLFEED_TEST_TMPDIR) / "s3_config";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(S3Url, BucketAndKey) {
  auto a = parse_url("s3://bucket/a/b.npy");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bucket, "bucket");
  EXPECT_EQ(a->key, "a/b.npy");
  auto b = parse_url("s3://bucket");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->key, "");
  EXPECT_FALSE(parse_url("s3:///key").ok());
  EXPECT_FALSE(parse_url("http://host/key").ok());
}

TEST(S3Url, KeysEncodedForSigV4) {
  EXPECT_EQ(uri_encode("a b/c~d_e-f.g", true), "a%20b/c~d_e-f.g");
  EXPECT_EQ(uri_encode("a/b", false), "a%2Fb");
  EXPECT_EQ(uri_encode("\xc3\xa9+=", true), "%C3%A9%2B%3D");
}

TEST(ObjectUrl, SchemesAndUnregisteredStores) {
  EXPECT_TRUE(is_object_url("s3://b/k"));
  EXPECT_TRUE(is_object_url("gs://b/k"));
  EXPECT_FALSE(is_object_url("/data/s3://x"));
  EXPECT_FALSE(is_object_url("data/train"));
  EXPECT_FALSE(is_object_url("://x"));
  absl::StatusOr<std::shared_ptr<ObjectStore>> none = object_store_for("gs://bucket/x");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("gs://bucket/x: no object store reads gs:// URLs"), std::string::npos);
}

TEST(S3Config, EnvironmentFirst) {
  Env env;
  env.set("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE");
  env.set("AWS_SECRET_ACCESS_KEY", "sekrit-value");
  env.set("AWS_SESSION_TOKEN", "tok");
  env.set("AWS_DEFAULT_REGION", "eu-west-3");
  env.set("AWS_ENDPOINT_URL", "http://127.0.0.1:8333/");
  auto c = current_config(Options{});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key, "AKIDEXAMPLE");
  EXPECT_EQ(c->session_token, "tok");
  EXPECT_EQ(c->region, "eu-west-3");
  EXPECT_EQ(c->endpoint, "http://127.0.0.1:8333");
  EXPECT_FALSE(c->virtual_host);  // a server of one's own: path-style
  EXPECT_EQ(request_url(*c, Location{"b", "x/y z"}), "http://127.0.0.1:8333/b/x/y%20z");
  env.set("AWS_ENDPOINT_URL_S3", "https://s3.example.org");
  env.set("DLFEED_S3_ADDRESSING", "virtual");
  c = current_config(Options{});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(request_url(*c, Location{"b", "k"}), "https://b.s3.example.org/k");
}

TEST(S3Config, AwsDefaultsAreVirtualHosted) {
  Env env;
  env.set("AWS_ACCESS_KEY_ID", "AKID");
  env.set("AWS_SECRET_ACCESS_KEY", "s");
  env.set("HOME", "/nonexistent");
  auto c = current_config(Options{});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->region, "us-east-1");
  EXPECT_EQ(request_url(*c, Location{"bkt", "a/b"}), "https://bkt.s3.us-east-1.amazonaws.com/a/b");
}

TEST(S3Config, ProfileFiles) {
  Env env;
  env.set("AWS_SHARED_CREDENTIALS_FILE",
          write_file("credentials",
                     "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n\n"
                     "[lab]\naws_access_key_id = LAB\naws_secret_access_key = LABSECRET\n"));
  env.set("AWS_CONFIG_FILE", write_file("config",
                                        "[default]\nregion = us-west-2\n[profile lab]\nregion = "
                                        "ap-south-1\nendpoint_url = http://10.0.0.1:9000\n"));
  auto c = current_config(Options{});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key, "D");
  EXPECT_EQ(c->region, "us-west-2");
  env.set("AWS_PROFILE", "lab");
  c = current_config(Options{});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key, "LAB");
  EXPECT_EQ(c->secret_key, "LABSECRET");
  EXPECT_EQ(c->region, "ap-south-1");
  EXPECT_EQ(c->endpoint, "http://10.0.0.1:9000");
  EXPECT_NE(c->where.find("profile lab"), std::string::npos);
}

TEST(S3Config, NoCredentialsSaysWhereItLooked) {
  Env env;
  env.set("HOME", "/nonexistent");
  env.set("AWS_SECRET_ACCESS_KEY", "only-the-secret");
  auto c = current_config(Options{});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(c.status()));
  const std::string msg(c.status().message());
  EXPECT_NE(msg.find("AWS_ACCESS_KEY_ID"), std::string::npos);
  EXPECT_EQ(msg.find("only-the-secret"), std::string::npos);
  env.set("AWS_ACCESS_KEY_ID", "A");
  env.set("AWS_ENDPOINT_URL", "ftp://x");
  c = current_config(Options{});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not an http:// or https:// URL"), std::string::npos);
}

TEST(S3CredentialProcess, CommandsSplitAsAShellSplitsThem) {
  using V = std::vector<std::string>;
  EXPECT_EQ(*split_command("aws configure export-credentials --format process"),
            (V{"aws", "configure", "export-credentials", "--format", "process"}));
  EXPECT_EQ(*split_command("  /opt/my tool  'a b' \"c \\\" d\" e\\ f ''"),
            (V{"/opt/my", "tool", "a b", "c \" d", "e f", ""}));
  EXPECT_EQ(*split_command("x\"y z\"'w'"), (V{"xy zw"}));
  EXPECT_FALSE(split_command("a 'b").ok());
  EXPECT_FALSE(split_command("a \"b").ok());
  EXPECT_FALSE(split_command("   ").ok());
}

TEST(S3CredentialProcess, OutputAsAwsToolsReadIt) {
  auto c = parse_process_output(
      R"({"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "S\/\u00e9", "SessionToken": "T",
          "Expiration": "2030-01-02T03:04:05Z", "Extra": {"a": [1, 2.5e3, null, true]}})",
      "w");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key, "AK");
  EXPECT_EQ(c->secret_key, "S/\xc3\xa9");
  EXPECT_EQ(c->session_token, "T");
  ASSERT_TRUE(c->expires.has_value());
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::seconds>(c->expires->time_since_epoch()).count(), 1893553445);
  c = parse_process_output(
      R"({"Version":1,"AccessKeyId":"AK","SecretAccessKey":"S","Expiration":"2030-01-02T05:04:05+02:00"})", "w");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::seconds>(c->expires->time_since_epoch()).count(), 1893553445);
  EXPECT_TRUE(
      parse_process_output(R"({"Version":1,"AccessKeyId":"A","SecretAccessKey":"S"})", "w")->session_token.empty());
  // null is absent, as AWS's tools read it: no token, no expiry.
  c = parse_process_output(
      R"({"Version":1,"AccessKeyId":"A","SecretAccessKey":"S","SessionToken":null,"Expiration":null})", "w");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->session_token.empty());
  EXPECT_FALSE(c->expires.has_value());
  // Refused, naming what was expected and where, never a value.
  const std::pair<const char*, const char*> bad[] = {
      {R"({"Version": 2, "AccessKeyId": "SECRETA", "SecretAccessKey": "SECRETS"})", "\"Version\": 1"},
      {R"({"Version": 1, "SecretAccessKey": "SECRETS"})", "\"AccessKeyId\""},
      {R"({"Version": 1, "AccessKeyId": "SECRETA"})", "\"SecretAccessKey\""},
      {R"({"Version": 1, "AccessKeyId": "SECRETA", "SecretAccessKey": "SECRETS"} trailing)", "nothing after"},
      {R"({"Version": 1, "AccessKeyId": "SECRETA", "SecretAccessKey": "SECRETS)", "a value for"},
      {"SECRETA SECRETS", "a JSON object"},
      {"", "a JSON object"},
      {R"({"Version": 1, "AccessKeyId": "SECRETA", "SecretAccessKey": "SECRETS", "Expiration": "tomorrow"})",
       "RFC 3339"}};
  for (const auto& [text, expected] : bad) {
    auto r = parse_process_output(text, "credential_process of profile p in F");
    ASSERT_FALSE(r.ok()) << text;
    const std::string msg(r.status().message());
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
    EXPECT_NE(msg.find("profile p in F"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("SECRET"), std::string::npos) << msg;
  }
}

TEST(S3CredentialProcess, RunsTheCommandAndSaysWhyItFailed) {
  const std::string ok = write_file("creds.sh",
                                    "#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": \"'\"$1\"'\", "
                                    "\"SecretAccessKey\": \"S\"}'\n");
  std::filesystem::permissions(ok, std::filesystem::perms::owner_all);
  const uint64_t runs = credential_process_runs();
  auto c = run_credential_process(ok + " 'key one'", "w", std::chrono::seconds(10));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key, "key one");
  EXPECT_EQ(credential_process_runs(), runs + 1);
  auto failed = run_credential_process("sh -c 'echo no token here >&2; exit 3'", "w", std::chrono::seconds(10));
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("exited with 3: no token here"), std::string::npos) << failed.status();
  auto missing = run_credential_process("/nonexistent/helper --x", "w", std::chrono::seconds(10));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'/nonexistent/helper --x' could not start"), std::string::npos)
      << missing.status();
  // A process that never ends is stopped at the timeout, even when its child keeps the pipe open.
  const auto t0 = std::chrono::steady_clock::now();
  auto slow = run_credential_process("sh -c 'sleep 30 & sleep 30'", "w", std::chrono::milliseconds(300));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_FALSE(slow.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(slow.status())) << slow.status();
  EXPECT_NE(slow.status().message().find("ran longer than 300 ms"), std::string::npos) << slow.status();
}

TEST(S3CredentialProcess, AProfileRunsItOnceUntilRefusedOrExpiring) {
  Env env;
  const std::string counter = std::string(DLFEED_TEST_TMPDIR) + "/s3_config/runs";
  std::filesystem::remove(counter);
  const std::string script =
      write_file("rotating.sh", "#!/bin/sh\necho x >> " + counter + "\nn=$(wc -l < " + counter + ")\n" +
                                    "echo '{\"Version\": 1, \"AccessKeyId\": \"K'$n'\", \"SecretAccessKey\": \"S\", "
                                    "\"SessionToken\": \"T'$n'\", \"Expiration\": \"'\"$1\"'\"}'\n");
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  env.set("HOME", "/nonexistent");
  env.set("AWS_PROFILE", "proc");
  env.set("AWS_CONFIG_FILE", write_file("config-proc", "[profile proc]\ncredential_process = " + script +
                                                           " 2999-01-01T00:00:00Z\nregion = eu-west-1\n"));
  auto c = current_config(Options{});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key, "K1");
  EXPECT_EQ(c->session_token, "T1");
  EXPECT_EQ(c->region, "eu-west-1");
  EXPECT_NE(c->where.find("credential_process of profile proc in "), std::string::npos);
  ASSERT_TRUE(c->expires.has_value());
  EXPECT_EQ(current_config(Options{})->access_key, "K1");  // kept: not run again
  // The server refused K1: run again; a caller refused K1 after that gets K2 as it is.
  auto again = current_config(Options{}, &*c);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->access_key, "K2");
  EXPECT_EQ(current_config(Options{}, &*c)->access_key, "K2");
  // Credentials expiring within 5 minutes (these expired long ago) are kept for 2 seconds only: the
  // same profile and command run again after that.
  env.set("AWS_CONFIG_FILE",
          write_file("config-proc2", "[profile proc]\ncredential_process = " + script + " 2000-01-01T00:00:00Z\n"));
  EXPECT_EQ(current_config(Options{})->access_key, "K3");
  EXPECT_EQ(current_config(Options{})->access_key, "K3");
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  EXPECT_EQ(current_config(Options{})->access_key, "K4");
  // Static keys in the credentials file come first, as AWS's tools take them.
  env.set("AWS_SHARED_CREDENTIALS_FILE",
          write_file("credentials-proc", "[proc]\naws_access_key_id = STATIC\naws_secret_access_key = S\n"));
  EXPECT_EQ(current_config(Options{})->access_key, "STATIC");
}

TEST(S3CredentialProcess, CallersThatWaitedForAFailedRunGetItsErrorNotARunEach) {
  // A helper that fails slowly (an SSO session that expired): the reads of a batch that all want
  // credentials wait for the one run and get its error, and a call right after gets it too.
  const std::string counter = std::string(DLFEED_TEST_TMPDIR) + "/s3_config/failing_runs";
  std::filesystem::create_directories(std::filesystem::path(counter).parent_path());
  std::filesystem::remove(counter);
  const std::string command = "sh -c 'echo x >> " + counter + "; sleep 0.3; echo expired >&2; exit 2'";
  std::vector<std::thread> callers;
  std::atomic<int> failed{0};
  for (int t = 0; t < 6; ++t) {
    callers.emplace_back([&] {
      if (!process_credentials(command, "profile f", std::chrono::seconds(10)).ok()) ++failed;
    });
  }
  for (std::thread& t : callers) t.join();
  auto again = process_credentials(command, "profile f", std::chrono::seconds(10));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("exited with 2: expired"), std::string::npos) << again.status();
  EXPECT_EQ(failed.load(), 6);
  std::ifstream in(counter);
  const std::string runs((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(runs, "x\n") << "one run for all";
}

TEST(S3Xml, ListingValuesAndEntities) {
  const std::string xml =
      "<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>a&amp;b &lt;1&gt;.npy</Key><Size>12</Size>"
      "<ETag>&quot;abc&quot;</ETag></Contents><Contents><Key>c.npy</Key><Size>3</Size></Contents>"
      "<NextContinuationToken>t+/=</NextContinuationToken></ListBucketResult>";
  std::vector<absl::string_view> items = xml_blocks(xml, "Contents");
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(xml_values(items[0], "Key"), std::vector<std::string>{"a&b <1>.npy"});
  EXPECT_EQ(xml_values(items[0], "ETag"), std::vector<std::string>{"\"abc\""});
  EXPECT_TRUE(xml_values(items[1], "ETag").empty());
  EXPECT_EQ(xml_values(xml, "NextContinuationToken"), std::vector<std::string>{"t+/="});
  EXPECT_TRUE(xml_blocks("<Contents><Key>x</Key>", "Contents").empty());  // unterminated: nothing
}

}  // namespace
}  // namespace dlfeed::s3::detail
