export default {
  test: {
    include: ["*.test.js"],
    setupFiles: ["llmreplay-test-setup/vitest"],
  },
};
