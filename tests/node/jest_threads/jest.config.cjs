// Workers are threads of the one jest process: only each request's header tells their tests
// apart.
module.exports = {
  testMatch: ["<rootDir>/*.test.cjs"],
  setupFilesAfterEnv: ["llmreplay-test-setup/jest"],
  workerThreads: true,
  maxWorkers: 3,
};
