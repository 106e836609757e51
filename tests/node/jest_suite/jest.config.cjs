module.exports = {
  testMatch: ["<rootDir>/*.test.cjs"],
  setupFilesAfterEnv: ["llmreplay-test-setup/jest"],
};
